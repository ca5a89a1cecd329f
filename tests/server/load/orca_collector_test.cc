#include "server/load/orca_collector.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/clock.h"
#include "server/base/metrics.h"
#include "server/load/load_aggregator.h"
#include "tests/testing/fake_orca.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

namespace aside::server {
namespace {

using ::aside::testing::FakeOrca;
using ::aside::testing::OrcaBackend;
using ::aside::testing::OrcaReport;
using ::xds::data::orca::v3::OrcaLoadReport;
using View = std::vector<OrcaCollector::BackendView>;

constexpr absl::Duration kWait = absl::Seconds(10);

OrcaCollector::Options FastRetries() {
  OrcaCollector::Options o;
  o.min_backoff = absl::Milliseconds(50);
  o.max_backoff = absl::Milliseconds(200);
  o.unimplemented_retry = absl::Hours(1);
  return o;
}

// The view of `address` in `v`, or null.
const OrcaCollector::BackendView* Find(const View& v,
                                       const std::string& address) {
  for (const OrcaCollector::BackendView& b : v) {
    if (b.address == address) {
      return &b;
    }
  }
  return nullptr;
}

auto Accepted(const std::string& address, uint64_t n) {
  return [address, n](const View& v) {
    const OrcaCollector::BackendView* b = Find(v, address);
    return b != nullptr && b->accepted >= n;
  };
}

double Counter(Metrics& metrics, const char* result) {
  return metrics.orca_reports.Add({{"result", result}}).Value();
}

TEST(OrcaCollectorTest, KeepsEachBackendsLatestReport) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(100, 0.25, 2));
  Metrics metrics;
  OrcaCollector orca(&SystemClock::Get(), &metrics, FastRetries());
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 2), kWait));
  std::optional<OrcaCollector::Report> r = orca.Latest(backend.address());
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->load.qps, 100);
  EXPECT_DOUBLE_EQ(r->load.cpu_utilization, 0.25);
  EXPECT_DOUBLE_EQ(r->load.eps, 2);
  EXPECT_GE(r->seq, 2u);
  // The stream asked for the group's interval.
  EXPECT_EQ(backend.orca().last_interval(), std::chrono::milliseconds(100));
  EXPECT_EQ(orca.Backends()[0].state, "streaming");
  EXPECT_EQ(metrics.orca_streams.Value(), 1);
  EXPECT_GE(Counter(metrics, "accepted"), 2);
  EXPECT_DOUBLE_EQ(
      metrics.orca_utilization.Add({{"address", backend.address()}}).Value(),
      0.25);
  EXPECT_FALSE(orca.Latest("127.0.0.1:1").has_value());
}

TEST(OrcaCollectorTest, GroupsSharingABackendShareOneStream) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(10, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("a", {backend.address()}, absl::Milliseconds(100));
  orca.Want("b", {backend.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 3), kWait));
  EXPECT_EQ(backend.orca().streams(), 1);
  EXPECT_EQ(orca.open_streams(), 1u);
  // One group letting go keeps the stream; the last one cancels it.
  orca.Want("a", {}, absl::Milliseconds(100));
  EXPECT_EQ(orca.open_streams(), 1u);
  orca.Want("b", {}, absl::Milliseconds(100));
  EXPECT_TRUE(backend.orca().AwaitOpen(0));
  EXPECT_TRUE(orca.Backends().empty());
  EXPECT_EQ(backend.orca().streams(), 1);
}

TEST(OrcaCollectorTest, ABackendAddedToAGroupLeavesTheOthersStreamsAlone) {
  OrcaBackend a;
  OrcaBackend b;
  a.orca().Set(OrcaReport(10, 0.5));
  b.orca().Set(OrcaReport(20, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("web", {a.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(a.address(), 2), kWait));
  const uint64_t seen = orca.Latest(a.address())->seq;
  orca.Want("web", {a.address(), b.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(b.address(), 1), kWait));
  // a's stream and its reports carried on.
  EXPECT_EQ(a.orca().streams(), 1);
  EXPECT_GE(orca.Latest(a.address())->seq, seen);
  orca.Want("web", {b.address()}, absl::Milliseconds(100));
  EXPECT_TRUE(a.orca().AwaitOpen(0));
  EXPECT_FALSE(orca.Latest(a.address()).has_value());
  EXPECT_EQ(b.orca().streams(), 1);
}

TEST(OrcaCollectorTest, TheShortestIntervalOfItsGroupsIsAskedFor) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(10, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("a", {backend.address()}, absl::Seconds(2));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 1), kWait));
  EXPECT_EQ(backend.orca().last_interval(), std::chrono::seconds(2));
  orca.Want("b", {backend.address()}, absl::Milliseconds(200));
  // The stream is opened again, asking for the shorter interval.
  ASSERT_TRUE(backend.orca().AwaitStreams(2));
  EXPECT_EQ(backend.orca().last_interval(), std::chrono::milliseconds(200));
  ASSERT_TRUE(backend.orca().AwaitOpen(1));
  EXPECT_EQ(orca.Backends()[0].interval, absl::Milliseconds(200));
}

TEST(OrcaCollectorTest, ABackendWithoutTheServiceIsMarkedAndNotAskedAgainSoon) {
  OrcaBackend backend(/*with_orca=*/false);
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(
      [&](const View& v) {
        const OrcaCollector::BackendView* b = Find(v, backend.address());
        return b != nullptr && b->state == "unimplemented";
      },
      kWait));
  EXPECT_EQ(orca.open_streams(), 0u);
  EXPECT_FALSE(orca.Latest(backend.address()).has_value());
  // With the retry an hour away, nothing is open however long one looks.
  EXPECT_FALSE(orca.AwaitBackends(
      [&](const View& v) { return v.empty() || v[0].state != "unimplemented"; },
      absl::Milliseconds(300)));
}

TEST(OrcaCollectorTest, ValuesOutOfBoundsRejectTheWholeReport) {
  OrcaBackend backend;
  Metrics metrics;
  OrcaCollector orca(&SystemClock::Get(), &metrics, FastRetries());
  orca.Start();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const OrcaLoadReport& bad :
       {OrcaReport(nan, 0.5), OrcaReport(100, -0.1), OrcaReport(100, 1e6),
        OrcaReport(1e12, 0.5), OrcaReport(100, 0.5, std::nan(""))}) {
    backend.orca().Set(bad);
    const double before = Counter(metrics, "rejected");
    orca.Want("web", {backend.address()}, absl::Milliseconds(100));
    ASSERT_TRUE(orca.AwaitBackends(
        [&](const View& v) {
          return !v.empty() && v[0].rejected >= 1 &&
                 Counter(metrics, "rejected") > before;
        },
        kWait))
        << bad.ShortDebugString();
    EXPECT_FALSE(orca.Latest(backend.address()).has_value());
    EXPECT_FALSE(orca.Backends()[0].last_error.empty());
    orca.Want("web", {}, absl::Milliseconds(100));
  }
  EXPECT_EQ(Counter(metrics, "accepted"), 0);
}

TEST(OrcaCollectorTest, AFloodIsThrottledToTheInterval) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(100, 0.5), /*burst=*/500);
  Metrics metrics;
  OrcaCollector orca(&SystemClock::Get(), &metrics, FastRetries());
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Seconds(1));
  ASSERT_TRUE(orca.AwaitBackends(
      [&](const View&) { return Counter(metrics, "throttled") >= 500; },
      kWait));
  // 501 reports arrived within one interval: one counts.
  EXPECT_LE(Counter(metrics, "accepted"), 2);
  EXPECT_EQ(orca.Latest(backend.address())->seq,
            static_cast<uint64_t>(Counter(metrics, "accepted")));
}

TEST(OrcaCollectorTest, AnOversizedReportEndsTheStreamAndItIsOpenedAgain) {
  OrcaBackend backend;
  OrcaLoadReport huge = OrcaReport(100, 0.5);
  for (int i = 0; i < 2000; ++i) {
    (*huge.mutable_named_metrics())[absl::StrCat("metric_", i)] = i;
  }
  ASSERT_GT(huge.ByteSizeLong(), 16u * 1024);
  backend.orca().Set(huge);
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(
      [&](const View& v) {
        return !v.empty() && v[0].last_error.find("failed") == 0;
      },
      kWait));
  EXPECT_FALSE(orca.Latest(backend.address()).has_value());
  // After its backoff the stream is opened again, and takes a good report.
  backend.orca().Set(OrcaReport(100, 0.5));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 1), kWait));
  EXPECT_GE(backend.orca().streams(), 2);
}

TEST(OrcaCollectorTest, AStreamIsOpenedAgainAfterTheBackendRestarts) {
  auto backend = std::make_unique<OrcaBackend>();
  backend->orca().Set(OrcaReport(100, 0.5));
  const std::string address = backend->address();
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("web", {address}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(address, 1), kWait));
  const uint64_t before = orca.Latest(address)->seq;
  backend->Shutdown();
  ASSERT_TRUE(orca.AwaitBackends(
      [&](const View& v) { return !v.empty() && v[0].state != "streaming"; },
      kWait));
  // A new backend on the same port.
  grpc::ServerBuilder builder;
  FakeOrca again;
  again.Set(OrcaReport(50, 0.5));
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&again);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(orca.AwaitBackends(Accepted(address, before + 1), kWait));
  EXPECT_DOUBLE_EQ(orca.Latest(address)->load.qps, 50);
  again.Stop();
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(OrcaCollectorTest, StopEndsEveryStream) {
  OrcaBackend a;
  OrcaBackend b;
  a.orca().Set(OrcaReport(1, 0.5));
  b.orca().Set(OrcaReport(1, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.Start();
  orca.Want("web", {a.address(), b.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(
      [&](const View& v) {
        return v.size() == 2 && v[0].accepted > 0 && v[1].accepted > 0;
      },
      kWait));
  orca.Stop();
  EXPECT_EQ(orca.open_streams(), 0u);
  EXPECT_TRUE(a.orca().AwaitOpen(0));
  EXPECT_TRUE(b.orca().AwaitOpen(0));
}

OrcaShare Share(const std::string& address, double qps, bool owner) {
  OrcaShare s;
  s.address = address;
  s.load.qps = qps;
  s.load.cpu_utilization = 0.5;
  s.seq = 1;
  s.owner = owner;
  return s;
}

TEST(OrcaCollectorFleetTest, ABackendOwnedElsewhereTakesTheOwnersReports) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(100, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.set_owns([](const std::string&) { return false; });
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Seconds(1));
  orca.ApplyPeer(Share(backend.address(), 70, /*owner=*/true));
  ASSERT_TRUE(orca.Latest(backend.address()).has_value());
  EXPECT_DOUBLE_EQ(orca.Latest(backend.address())->load.qps, 70);
  EXPECT_EQ(orca.Backends()[0].state, "peer");
  // Shared onwards only by the replica holding the stream.
  EXPECT_TRUE(orca.ExportOwn().empty());
  EXPECT_EQ(orca.open_streams(), 0u);
  // A backend no group here wants is not taken.
  orca.ApplyPeer(Share("127.0.0.1:1", 70, true));
  EXPECT_FALSE(orca.Latest("127.0.0.1:1").has_value());
  EXPECT_EQ(backend.orca().streams(), 0);
}

TEST(OrcaCollectorFleetTest,
     AnUnservedBackendIsStreamedHereUntilItsOwnerReports) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(100, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.set_owns([](const std::string&) { return false; });
  orca.Start();
  const absl::Time wanted = absl::Now();
  orca.Want("web", {backend.address()}, absl::Milliseconds(100));
  // No owner reports: after three intervals and the grace, a stream here.
  ASSERT_TRUE(backend.orca().AwaitStreams(1));
  EXPECT_GE(absl::Now() - wanted, absl::Seconds(3));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 1), kWait));
  std::vector<OrcaShare> own = orca.ExportOwn();
  ASSERT_EQ(own.size(), 1u);
  EXPECT_FALSE(own[0].owner);
  // Another non-owner's report changes nothing; the owner's closes ours.
  orca.ApplyPeer(Share(backend.address(), 70, /*owner=*/false));
  EXPECT_DOUBLE_EQ(orca.Latest(backend.address())->load.qps, 100);
  orca.ApplyPeer(Share(backend.address(), 70, /*owner=*/true));
  EXPECT_DOUBLE_EQ(orca.Latest(backend.address())->load.qps, 70);
  EXPECT_TRUE(backend.orca().AwaitOpen(0));
}

TEST(OrcaCollectorFleetTest, TheOwnerKeepsItsStreamAndSharesIt) {
  OrcaBackend backend;
  backend.orca().Set(OrcaReport(100, 0.5));
  OrcaCollector orca(&SystemClock::Get(), nullptr, FastRetries());
  orca.set_owns([](const std::string&) { return true; });
  orca.Start();
  orca.Want("web", {backend.address()}, absl::Milliseconds(100));
  ASSERT_TRUE(orca.AwaitBackends(Accepted(backend.address(), 1), kWait));
  orca.ApplyPeer(Share(backend.address(), 70, /*owner=*/true));
  EXPECT_DOUBLE_EQ(orca.Latest(backend.address())->load.qps, 100);
  std::vector<OrcaShare> own = orca.ExportOwn();
  ASSERT_EQ(own.size(), 1u);
  EXPECT_TRUE(own[0].owner);
  EXPECT_DOUBLE_EQ(own[0].load.qps, 100);
  EXPECT_EQ(backend.orca().open(), 1);
}

}  // namespace
}  // namespace aside::server
