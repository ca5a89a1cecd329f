// The per-group series: rendered with the names, labels, types and order
// prometheus-cpp's families gave them, and gone with their group.
#include "server/base/group_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/base/metrics.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(GroupMetricsTest, SeriesAreRenderedByGroupAndLabel) {
  Metrics metrics;
  auto web = std::make_unique<GroupMetrics>(&metrics.group_series(), "web");
  auto api = std::make_unique<GroupMetrics>(&metrics.group_series(), "api");
  web->picks_ok->Increment(3);
  web->picks_unavailable->Increment();
  web->ready->Set(2);
  web->total->Set(5);
  web->panic->Set(1);
  web->generation->Set(7);
  web->rebuilds->Increment(4);
  web->watch_subscribers->Increment();
  web->watch_delta->Increment(6);
  api->watch_full->Increment();
  const std::string text = metrics.Render();
  // Groups in name order, the second label's values in order within one.
  EXPECT_THAT(text, HasSubstr("# TYPE aside_picks_total counter\n"
                              "aside_picks_total{group=\"api\",result="
                              "\"invalid\"} 0\n"
                              "aside_picks_total{group=\"api\",result=\"ok\"} "
                              "0\n"
                              "aside_picks_total{group=\"api\",result="
                              "\"unavailable\"} 0\n"
                              "aside_picks_total{group=\"web\",result="
                              "\"invalid\"} 0\n"
                              "aside_picks_total{group=\"web\",result=\"ok\"} "
                              "3\n"
                              "aside_picks_total{group=\"web\",result="
                              "\"unavailable\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE aside_group_backends gauge\n"));
  EXPECT_THAT(text,
              HasSubstr("aside_group_backends{group=\"web\",state=\"ready\"} "
                        "2\naside_group_backends{group=\"web\",state="
                        "\"total\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("aside_group_panic{group=\"web\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE aside_table_generation gauge\n"));
  EXPECT_THAT(text, HasSubstr("aside_table_generation{group=\"web\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE aside_table_rebuilds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("aside_table_rebuilds_total{group=\"web\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("aside_watch_subscribers{group=\"web\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE aside_watch_updates_total counter\n"));
  EXPECT_THAT(text, HasSubstr("aside_watch_updates_total{group=\"api\",kind="
                              "\"full\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("aside_watch_updates_total{group=\"web\",kind="
                              "\"delta\"} 6\n"));
  // In the order the families were registered among the others.
  const std::vector<std::string> order = {
      "# TYPE aside_build_info",
      "# TYPE aside_picks_total",
      "# TYPE aside_pick_duration_seconds",
      "# TYPE aside_group_backends",
      "# TYPE aside_group_panic",
      "# TYPE aside_table_generation",
      "# TYPE aside_table_rebuilds_total",
      "# TYPE aside_table_rebuild_duration_seconds",
      "# TYPE aside_watch_subscribers",
      "# TYPE aside_watch_updates_total",
      "# TYPE aside_watch_fanout_seconds"};
  size_t at = 0;
  for (const std::string& family : order) {
    const size_t found = text.find(family);
    ASSERT_NE(found, std::string::npos) << family;
    EXPECT_GT(found + 1, at) << family;
    at = found;
  }
}

TEST(GroupMetricsTest, RemovedGroupLeavesNoSeriesAndNoEmptyFamily) {
  Metrics metrics;
  auto web = std::make_unique<GroupMetrics>(&metrics.group_series(), "web");
  auto api = std::make_unique<GroupMetrics>(&metrics.group_series(), "api");
  web.reset();
  std::string text = metrics.Render();
  EXPECT_THAT(text, Not(HasSubstr("group=\"web\"")));
  EXPECT_THAT(text, HasSubstr("aside_group_panic{group=\"api\"} 0\n"));
  api.reset();
  text = metrics.Render();
  EXPECT_THAT(text, Not(HasSubstr("aside_picks_total")));
  EXPECT_THAT(text, Not(HasSubstr("aside_watch_updates_total")));
  EXPECT_TRUE(metrics.group_series().Collect().empty());
}

}  // namespace
}  // namespace aside::server
