// The per-call ORCA trailer parser against messages protobuf serialises.
#include "lib/load/orca_report.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "xds/data/orca/v3/orca_load_report.pb.h"

namespace aside {
namespace {

using xds::data::orca::v3::OrcaLoadReport;

TEST(OrcaReportTest, ReadsTheFieldsWeightsUseAndSkipsTheRest) {
  OrcaLoadReport r;
  r.set_cpu_utilization(0.5);
  r.set_mem_utilization(0.25);
  r.set_rps(7);
  (*r.mutable_request_cost())["db"] = 3.5;
  (*r.mutable_utilization())["queue"] = 0.9;
  r.set_rps_fractional(120.5);
  r.set_eps(2);
  (*r.mutable_named_metrics())["x"] = 1;
  r.set_application_utilization(0.75);
  const std::optional<OrcaLoad> load =
      ParseOrcaLoadReport(r.SerializeAsString());
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->cpu_utilization, 0.5);
  EXPECT_EQ(load->application_utilization, 0.75);
  EXPECT_EQ(load->qps, 120.5);
  EXPECT_EQ(load->eps, 2);
}

TEST(OrcaReportTest, ReadsTheNamedMetricsPrequalUses) {
  xds::data::orca::v3::OrcaLoadReport r;
  r.set_cpu_utilization(0.5);
  (*r.mutable_named_metrics())["x"] = 1;
  (*r.mutable_named_metrics())["rif"] = 7;
  (*r.mutable_named_metrics())["latency_ms"] = 12.5;
  const std::optional<OrcaLoad> load =
      ParseOrcaLoadReport(r.SerializeAsString());
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->cpu_utilization, 0.5);
  EXPECT_EQ(load->rif, 7);
  EXPECT_EQ(load->latency_ms, 12.5);
  // Not reported: negative.
  const std::optional<OrcaLoad> none = ParseOrcaLoadReport("");
  ASSERT_TRUE(none.has_value());
  EXPECT_LT(none->rif, 0);
  EXPECT_LT(none->latency_ms, 0);
  // A negative RIF is refused.
  (*r.mutable_named_metrics())["rif"] = -1;
  EXPECT_FALSE(ParseOrcaLoadReport(r.SerializeAsString()).has_value());
}

TEST(OrcaReportTest, AnEmptyReportIsAllZeros) {
  const std::optional<OrcaLoad> load = ParseOrcaLoadReport("");
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(*load, OrcaLoad{});
}

TEST(OrcaReportTest, TheLastOccurrenceWins) {
  OrcaLoadReport a;
  a.set_cpu_utilization(0.1);
  OrcaLoadReport b;
  b.set_cpu_utilization(0.9);
  const std::optional<OrcaLoad> load =
      ParseOrcaLoadReport(a.SerializeAsString() + b.SerializeAsString());
  ASSERT_TRUE(load.has_value());
  EXPECT_EQ(load->cpu_utilization, 0.9);
}

TEST(OrcaReportTest, MalformedOrUnusableReportsAreRefused) {
  OrcaLoadReport r;
  r.set_cpu_utilization(0.5);
  (*r.mutable_utilization())["queue"] = 0.9;
  const std::string good = r.SerializeAsString();
  for (size_t n = 1; n < good.size(); ++n) {
    if (n == 9) {
      continue;  // the whole cpu_utilization field: a message of its own
    }
    EXPECT_FALSE(ParseOrcaLoadReport(good.substr(0, n)).has_value())
        << "truncated to " << n << " bytes";
  }
  OrcaLoadReport negative;
  negative.set_application_utilization(-0.1);
  EXPECT_FALSE(ParseOrcaLoadReport(negative.SerializeAsString()).has_value());
  OrcaLoadReport nan;
  nan.set_eps(std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(ParseOrcaLoadReport(nan.SerializeAsString()).has_value());
  OrcaLoadReport inf;
  inf.set_rps_fractional(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(ParseOrcaLoadReport(inf.SerializeAsString()).has_value());
  EXPECT_FALSE(ParseOrcaLoadReport(std::string("\x00", 1)).has_value())
      << "field number 0";
  EXPECT_FALSE(ParseOrcaLoadReport("\x0b").has_value()) << "a group";
}

}  // namespace
}  // namespace aside
