// The status page's history rings and event ring, fed by hand with a fake
// clock: rates from counters, shares, "not measured" kept apart from zero,
// the window's length, the caps, forgetting, and the JSON served.
#include "server/status/history.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/status/events.h"

namespace aside::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

HistoryBackendInput Backend(std::string address, uint32_t weight,
                            uint64_t picks) {
  HistoryBackendInput b;
  b.address = std::move(address);
  b.effective_weight = weight;
  b.health = HealthState::kHealthy;
  b.ready = true;
  b.eligible = weight > 0;
  b.picks = picks;
  return b;
}

HistoryGroupInput Group(std::string name, uint64_t picks,
                        std::vector<HistoryBackendInput> backends) {
  HistoryGroupInput g;
  g.name = std::move(name);
  g.picks = picks;
  g.total = static_cast<uint32_t>(backends.size());
  g.ready = g.total;
  g.backends = std::move(backends);
  return g;
}

class HistoryTest : public ::testing::Test {
 protected:
  StatusHistory Make(HistoryOptions options = {}) {
    options.clock = &clock_;
    return StatusHistory({}, options);
  }
  FakeClock clock_;
};

TEST_F(HistoryTest, RatesAndSharesFromCountersOneIntervalApart) {
  StatusHistory h = Make();
  h.Record({Group("web", 0, {Backend("a:1", 300, 0), Backend("b:1", 100, 0)})});
  clock_.Advance(absl::Seconds(5));
  h.Record(
      {Group("web", 100, {Backend("a:1", 300, 75), Backend("b:1", 100, 25)})});

  std::optional<GroupHistory> g = h.Read("web");
  ASSERT_TRUE(g.has_value());
  ASSERT_EQ(g->times.size(), 2u);
  EXPECT_EQ(g->times[1] - g->times[0], absl::Seconds(5));
  // The first sample has nothing to take a rate from: not measured, not 0.
  EXPECT_TRUE(std::isnan(g->picks_per_second[0]));
  EXPECT_DOUBLE_EQ(g->picks_per_second[1], 20);
  // No load reports: requests and latency were never measured.
  EXPECT_TRUE(std::isnan(g->requests_per_second[1]));
  EXPECT_TRUE(std::isnan(g->latency_ms[1]));
  ASSERT_EQ(g->backends.size(), 2u);
  EXPECT_EQ(g->backends[0].address, "a:1");
  EXPECT_NEAR(g->backends[0].pick_share[1], 0.75, 1e-4);
  EXPECT_NEAR(g->backends[0].weight_share[1], 0.75, 1e-4);
  EXPECT_NEAR(g->backends[1].pick_share[1], 0.25, 1e-4);
  EXPECT_TRUE(std::isnan(g->backends[0].pick_share[0]));
  EXPECT_EQ(g->backends[0].effective_weight[1], 300u);
  EXPECT_EQ(g->backends[0].health[1], HealthState::kHealthy);
  EXPECT_TRUE(std::isnan(g->backends[0].in_flight[1]));
}

TEST_F(HistoryTest, ADrainedBackendsShareDropsToZeroAtTheNextSample) {
  StatusHistory h = Make();
  h.Record({Group("web", 0, {Backend("a:1", 100, 0), Backend("b:1", 100, 0)})});
  clock_.Advance(absl::Seconds(5));
  h.Record(
      {Group("web", 100, {Backend("a:1", 100, 50), Backend("b:1", 100, 50)})});
  clock_.Advance(absl::Seconds(5));
  HistoryBackendInput drained = Backend("b:1", 0, 50);
  drained.drained = true;
  drained.ready = false;
  h.Record({Group("web", 200, {Backend("a:1", 100, 150), drained})});

  std::optional<GroupHistory> g = h.Read("web");
  ASSERT_TRUE(g.has_value());
  const GroupHistory::Backend& b = g->backends[1];
  EXPECT_NEAR(b.pick_share[1], 0.5, 1e-4);
  EXPECT_EQ(b.pick_share[2], 0);
  EXPECT_EQ(b.weight_share[2], 0);
  EXPECT_EQ(b.drained[2], true);
  EXPECT_EQ(g->backends[0].pick_share[2], 1);
}

TEST_F(HistoryTest, LoadReportsGiveGroupRatesAndRequestWeightedLatency) {
  StatusHistory h = Make();
  HistoryBackendInput a = Backend("a:1", 100, 0);
  a.reported = true;
  a.requests_per_second = 30;
  a.errors_per_second = 3;
  a.latency_ms = 10;
  a.window_requests = 300;
  a.in_flight = 4;
  HistoryBackendInput b = Backend("b:1", 100, 0);
  b.reported = true;
  b.requests_per_second = 10;
  b.latency_ms = 50;
  b.window_requests = 100;
  h.Record({Group("web", 0, {a, b})});

  std::optional<GroupHistory> g = h.Read("web");
  ASSERT_TRUE(g.has_value());
  EXPECT_FLOAT_EQ(g->requests_per_second[0], 40);
  EXPECT_FLOAT_EQ(g->errors_per_second[0], 3);
  EXPECT_FLOAT_EQ(g->latency_ms[0], 20);  // (300 * 10 + 100 * 50) / 400
  // No server-side picks: the share is of reported requests.
  EXPECT_NEAR(g->backends[0].pick_share[0], 0.75, 1e-4);
  EXPECT_EQ(g->backends[0].in_flight[0], 4);
}

TEST_F(HistoryTest, KeepsTheLastWindowOnly) {
  StatusHistory h = Make({.samples = 4});
  for (uint64_t i = 0; i < 10; ++i) {
    h.Record({Group("web", i * 10, {Backend("a:1", 100, i * 10)})});
    clock_.Advance(absl::Seconds(5));
  }
  std::optional<GroupHistory> g = h.Read("web");
  ASSERT_TRUE(g.has_value());
  ASSERT_EQ(g->times.size(), 4u);
  EXPECT_EQ(g->times.back() - g->times.front(), absl::Seconds(15));
  EXPECT_THAT(g->picks_per_second, ElementsAre(2, 2, 2, 2));
  EXPECT_EQ(h.stats().samples, 10u);
}

TEST_F(HistoryTest, MaybeSampleFollowsTheClock) {
  StatusHistory h = Make({.interval = absl::Seconds(5)});
  EXPECT_TRUE(h.MaybeSample());  // the first, at once
  EXPECT_FALSE(h.MaybeSample());
  clock_.Advance(absl::Seconds(4));
  EXPECT_FALSE(h.MaybeSample());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(h.MaybeSample());
  EXPECT_EQ(h.stats().samples, 2u);
}

TEST_F(HistoryTest, CapsAreCountedNotTracked) {
  StatusHistory h =
      Make({.max_groups = 2, .max_backends_per_group = 2, .max_backends = 3});
  h.Record({Group("a", 0,
                  {Backend("1:1", 1, 0), Backend("2:1", 1, 0),
                   Backend("3:1", 1, 0)}),
            Group("b", 0, {Backend("1:1", 1, 0), Backend("2:1", 1, 0)}),
            Group("c", 0, {Backend("1:1", 1, 0)})});
  const StatusHistory::Stats s = h.stats();
  EXPECT_EQ(s.groups, 2u);
  EXPECT_EQ(s.backends, 3u);
  EXPECT_EQ(s.untracked_groups, 1u);
  // a's third (per group), b's second (in all), c's one.
  EXPECT_EQ(s.untracked_backends, 3u);
  EXPECT_FALSE(h.Read("c").has_value());
  EXPECT_EQ(h.Read("a")->untracked_backends, 1u);
  EXPECT_THAT(h.Json("", false), HasSubstr("\"untracked_groups\":1"));
}

TEST_F(HistoryTest, ARemovedBackendLeavesAGapThenIsForgotten) {
  StatusHistory h = Make({.samples = 3});
  h.Record({Group("web", 0, {Backend("a:1", 1, 0), Backend("b:1", 1, 0)})});
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Seconds(5));
    h.Record({Group("web", 0, {Backend("a:1", 1, 0)})});
  }
  std::optional<GroupHistory> g = h.Read("web");
  ASSERT_EQ(g->backends.size(), 2u);
  EXPECT_EQ(g->backends[1].effective_weight[0], 1u);
  EXPECT_FALSE(g->backends[1].effective_weight[1].has_value());
  clock_.Advance(absl::Seconds(5));
  h.Record({Group("web", 0, {Backend("a:1", 1, 0)})});
  EXPECT_EQ(h.Read("web")->backends.size(), 1u);
  EXPECT_EQ(h.stats().backends, 1u);
  // And a group gone for a window.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(5));
    h.Record({});
  }
  EXPECT_FALSE(h.Read("web").has_value());
  EXPECT_EQ(h.stats().backends, 0u);
}

TEST_F(HistoryTest, RingsDoNotGrowWithTime) {
  StatusHistory h = Make();
  h.Record({Group("web", 0, {Backend("a:1", 1, 0)})});
  const size_t bytes = h.stats().ring_bytes;
  EXPECT_GT(bytes, 0u);
  for (int i = 0; i < 1000; ++i) {
    clock_.Advance(absl::Seconds(5));
    h.Record({Group("web", 0, {Backend("a:1", 1, 0)})});
  }
  EXPECT_EQ(h.stats().ring_bytes, bytes);
  EXPECT_EQ(h.Read("web")->times.size(), 180u);
}

TEST_F(HistoryTest, JsonSaysNullForWhatWasNotMeasured) {
  StatusHistory h = Make();
  h.Record({Group("web", 0, {Backend("a:1", 100, 0)})});
  clock_.Advance(absl::Seconds(5));
  h.Record({Group("web", 10, {Backend("a:1", 100, 10)})});
  const std::string json = h.Json("web", true);
  EXPECT_THAT(json, HasSubstr("\"interval_seconds\":5"));
  EXPECT_THAT(json, HasSubstr("\"picks_per_second\":[null,2]"));
  EXPECT_THAT(json, HasSubstr("\"pick_share\":[null,1]"));
  EXPECT_THAT(json, HasSubstr("\"latency_ms\":[null,null]"));
  EXPECT_THAT(json, HasSubstr("\"health\":[\"healthy\",\"healthy\"]"));
  EXPECT_THAT(h.Json("web", false), Not(HasSubstr("\"backends\":[")));
  EXPECT_THAT(h.Json("nope", true), HasSubstr("\"groups\":[]"));
}

// A response stops at its size budget and says where to go on.
TEST_F(HistoryTest, JsonIsCutAtItsBudgetAndGoesOnAfterTheLastGroup) {
  StatusHistory h = Make();
  std::vector<HistoryGroupInput> groups;
  for (int i = 0; i < 50; ++i) {
    groups.push_back(Group(absl::StrCat("g", 10 + i), 0,
                           {Backend("a:1", 100, 0), Backend("b:1", 100, 0)}));
  }
  h.Record(groups);
  const std::string whole = h.Json("", true);
  EXPECT_THAT(whole, Not(HasSubstr("truncated")));
  const std::string first = h.Json("", true, "", whole.size() / 4);
  EXPECT_LT(first.size(), whole.size() / 2);
  EXPECT_THAT(first, HasSubstr("\"truncated\":true"));
  const size_t at = first.find("\"next_after\":\"");
  ASSERT_NE(at, std::string::npos);
  const std::string next =
      first.substr(at + 14, first.find('"', at + 14) - (at + 14));
  const std::string rest = h.Json("", true, next);
  EXPECT_THAT(rest, Not(HasSubstr(absl::StrCat("\"name\":\"", next, "\""))));
  EXPECT_THAT(rest, HasSubstr("\"name\":\"g59\""));
  EXPECT_THAT(rest, Not(HasSubstr("truncated")));
}

TEST_F(HistoryTest, StoreAndFleetChangesBecomeEvents) {
  EventLog events(&clock_);
  bool up = true;
  std::vector<std::string> members = {"m1", "m2"};
  StatusHistory h({.events = &events,
                   .store_up = [&up] { return up; },
                   .fleet_members = [&members] { return members; }},
                  {.clock = &clock_});
  h.Sample();
  EXPECT_EQ(events.recorded(), 0u);  // the first sample only notes
  up = false;
  members = {"m2", "m3"};
  clock_.Advance(absl::Seconds(5));
  h.Sample();
  std::vector<Event> list = events.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].kind, EventKind::kStoreDown);
  EXPECT_EQ(list[1].kind, EventKind::kMemberJoined);
  EXPECT_EQ(list[1].backend, "m3");
  EXPECT_EQ(list[2].kind, EventKind::kMemberLeft);
  EXPECT_EQ(list[2].backend, "m1");
}

TEST(EventLogTest, KeepsTheLastEventsInOrderWithTheirTime) {
  FakeClock clock;
  EventLog log(&clock, 3);
  for (int i = 0; i < 5; ++i) {
    log.Record(EventKind::kDrained, "web", absl::StrCat("b:", i), "drain");
    clock.Advance(absl::Seconds(1));
  }
  std::vector<Event> list = log.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].backend, "b:2");
  EXPECT_EQ(list[2].backend, "b:4");
  EXPECT_EQ(list[2].seq, 5u);
  EXPECT_EQ(list[2].time - list[0].time, absl::Seconds(2));
  EXPECT_EQ(log.recorded(), 5u);
  EXPECT_EQ(log.dropped(), 2u);
}

TEST(EventLogTest, FiltersByGroupKeepingFleetWideEvents) {
  FakeClock clock;
  EventLog log(&clock);
  log.Record(EventKind::kHealth, "web", "a:1", "healthy -> unhealthy");
  log.Record(EventKind::kHealth, "db", "b:1", "healthy -> unhealthy");
  log.Record(EventKind::kConfigReloaded, "", "", "sighup");
  std::vector<Event> web = log.List("web");
  ASSERT_EQ(web.size(), 2u);
  EXPECT_EQ(web[0].group, "web");
  EXPECT_EQ(web[1].kind, EventKind::kConfigReloaded);
  const std::string json = log.Json("db");
  EXPECT_THAT(json, HasSubstr("\"kind\":\"health\",\"group\":\"db\""));
  EXPECT_THAT(json, Not(HasSubstr("\"web\"")));
  EXPECT_THAT(json, HasSubstr("\"time\":\"2027-01-15T08:00:00.000Z\""));
}

TEST(EventLogTest, LongFieldsAreCut) {
  FakeClock clock;
  EventLog log(&clock);
  log.Record(EventKind::kHealth, "web", "a:1", std::string(10000, 'x'));
  EXPECT_EQ(log.List()[0].cause.size(), EventLog::kMaxFieldBytes);
}

}  // namespace
}  // namespace aside::server
