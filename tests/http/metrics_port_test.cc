// The metrics port as the product serves it (Metrics::Serve): Prometheus
// text that parses, and the slow-connection abuse of DESIGN.md §9: while
// 500 connections that never send a byte and 10 that trickle a request one
// byte every 200 ms are open, scrapes keep succeeding with the default
// caps. Prints each phase's scrape latency (asserting success, not speed).
#include "server/net/metrics_port.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/sync.h"
#include "server/base/metrics.h"
#include "tests/http/metric_value.h"
#include "tests/http/raw_client.h"
#include "tests/testing/http_client.h"

namespace aside::server {
namespace {

using ::aside::testing::CountOpenFds;
using ::aside::testing::MetricValue;
using ::aside::testing::RawConnection;
using ::aside::testing::Trickler;
using ::aside::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr char kLocal[] = "127.0.0.1";
constexpr int kSilent = 500;
constexpr int kTrickling = 10;
constexpr int kScrapes = 50;
// Silent connections come from 20 loopback addresses, 25 each: under the
// default per-peer cap (32), so only the total cap (512) bounds them.
constexpr int kSilentPeers = 20;

struct Latencies {
  std::vector<double> ms;
  std::string Summary() const {
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    auto at = [&](double q) {
      return s[std::min(s.size() - 1, static_cast<size_t>(q * s.size()))];
    };
    return absl::StrFormat("n=%d min=%.2f p50=%.2f p90=%.2f max=%.2f ms",
                           s.size(), s.front(), at(0.5), at(0.9), s.back());
  }
};

// Scrapes `n` times in a row; every scrape must succeed.
Latencies Scrape(int port, int n) {
  Latencies out;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto res =
        aside::testing::HttpGet(kLocal, port, "/metrics", absl::Seconds(5));
    const auto end = std::chrono::steady_clock::now();
    EXPECT_TRUE(res.ok()) << "scrape " << i << ": " << res.status();
    if (res.ok()) {
      EXPECT_EQ(res->status, 200);
      EXPECT_THAT(res->body, HasSubstr("aside_build_info"));
    }
    out.ms.push_back(
        std::chrono::duration<double, std::milli>(end - start).count());
  }
  return out;
}

TEST(MetricsServeTest, ServesPrometheusTextThatParses) {
  Metrics metrics;
  MetricsPort http(metrics);
  absl::StatusOr<int> port = http.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  auto first = aside::testing::HttpGet(kLocal, *port, "/metrics");
  ASSERT_TRUE(first.ok()) << first.status();
  auto res = aside::testing::HttpGet(kLocal, *port, "/metrics");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->content_type, "text/plain; version=0.0.4; charset=utf-8");
  // Every line is a comment or `name{labels} value` (text format 0.0.4).
  const std::regex sample(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? ([-+]?[0-9.eE+-]+|NaN|[+-]Inf)$)re");
  int samples = 0;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.empty() || line.front() == '#') {
      continue;
    }
    EXPECT_TRUE(std::regex_match(line.begin(), line.end(), sample)) << line;
    ++samples;
  }
  EXPECT_GT(samples, 10);
  EXPECT_THAT(res->body, HasSubstr("aside_build_info{"));
  // The server's own metrics are in the same registry.
  EXPECT_THAT(
      res->body,
      HasSubstr(R"(aside_http_requests_total{code="200",path="/metrics"} 1)"));
  EXPECT_THAT(res->body, HasSubstr("aside_http_connections_accepted_total 2"));
  http.StopServing();
  http.StopServing();  // idempotent
  EXPECT_FALSE(
      aside::testing::HttpGet(kLocal, *port, "/metrics", absl::Seconds(2))
          .ok());
}

TEST(MetricsAbuseTest, ScrapesSucceedWhileSlowConnectionsHoldThePort) {
  // The clients' and the server's descriptors share this process.
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 4096 && limit.rlim_max > limit.rlim_cur) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4096);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  ASSERT_GE(limit.rlim_cur, 2 * (kSilent + kTrickling) + 100u);

  Metrics metrics;
  MetricsPort http(metrics);
  HttpServerOptions options;
  // Long enough that no slow connection is closed during the run: the
  // scrapes are served while all of them are open.
  options.header_timeout = absl::Seconds(60);
  absl::StatusOr<int> port = http.Serve("127.0.0.1:0", options);
  ASSERT_TRUE(port.ok()) << port.status();
  auto open = [&] {
    return MetricValue(*metrics.registry(), "aside_http_connections_open");
  };

  Scrape(*port, 1);  // warm up
  ASSERT_TRUE(WaitUntil([&] { return open() == 0; }, absl::Seconds(5)));
  const int baseline_fds = CountOpenFds();
  const Latencies quiet = Scrape(*port, kScrapes);

  std::vector<RawConnection> silent;
  for (int i = 0; i < kSilent; ++i) {
    auto conn = RawConnection::Connect(
        kLocal, *port, absl::StrCat("127.0.0.", 2 + i % kSilentPeers));
    ASSERT_TRUE(conn.ok()) << conn.status();
    silent.push_back(*std::move(conn));
  }
  std::vector<RawConnection> trickling;
  for (int i = 0; i < kTrickling; ++i) {
    auto conn = RawConnection::Connect(kLocal, *port, "127.0.0.100");
    ASSERT_TRUE(conn.ok()) << conn.status();
    trickling.push_back(*std::move(conn));
  }
  std::vector<RawConnection*> trickling_ptrs;
  for (RawConnection& c : trickling) {
    trickling_ptrs.push_back(&c);
  }
  Trickler trickler(trickling_ptrs, absl::Milliseconds(200));
  ASSERT_TRUE(WaitUntil([&] { return open() == kSilent + kTrickling; },
                        absl::Seconds(10)))
      << "open: " << open();

  const Latencies abused = Scrape(*port, kScrapes);

  // The slow connections were all still open: the scrapes did not get
  // through by the server dropping them.
  int still_open = 0;
  for (auto* group : {&silent, &trickling}) {
    for (RawConnection& conn : *group) {
      still_open += conn.PeerOpen() ? 1 : 0;
    }
  }
  EXPECT_EQ(still_open, kSilent + kTrickling);
  EXPECT_GE(trickler.sent(), 1);
  EXPECT_EQ(
      MetricValue(*metrics.registry(), "aside_http_connections_rejected_total",
                  {{"reason", "total_limit"}}),
      0);

  std::printf("scrape latency, quiet port:                %s\n",
              quiet.Summary().c_str());
  std::printf("scrape latency, %d silent + %d trickling: %s\n", kSilent,
              kTrickling, abused.Summary().c_str());
  RecordProperty("quiet_summary", quiet.Summary());
  RecordProperty("abused_summary", abused.Summary());

  trickler.Stop();
  silent.clear();
  trickling.clear();
  EXPECT_TRUE(
      WaitUntil([&] { return open() == 0 && CountOpenFds() == baseline_fds; },
                absl::Seconds(10)))
      << "open " << open() << ", fds " << CountOpenFds() << " vs "
      << baseline_fds;
  http.StopServing();
}

}  // namespace
}  // namespace aside::server
