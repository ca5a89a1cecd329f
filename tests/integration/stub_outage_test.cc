// Services restarted while every Aside server is down, end to end: the
// real aside-server binary (one replica, its group from the config file),
// backend processes (deploy_backend.cc) and services balancing with the
// stub (deploy_stub.cc: aside::Client with a table cache directory), each
// a process of its own. The services learn the group's table and keep it
// on disk; Aside stops; the group changes meanwhile (a backend leaves, one
// joins); the services restart and serve from their cached tables without
// a failed call; Aside returns, and every service takes the server's table
// on its first connection and calls the new backend.
//
// Aside listens on a unix socket in the test's directory, so that it comes
// back at the same address without the test choosing a TCP port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/table_cache.h"
#include "tests/integration/deploy_fixtures.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::BackendProcess;
using ::aside::testing::ClientTotals;
using ::aside::testing::MonotonicNanos;
using ::aside::testing::Process;
using ::aside::testing::RunningServer;
using ::aside::testing::StartChild;
using ::aside::testing::TempDir;

constexpr char kGroup[] = "web";
constexpr int kBackends = 3;
constexpr int kStubs = 2;
constexpr double kStubCallsPerSecond = 50;
// Calls each restarted service makes from its cached table while Aside is
// down (two seconds' worth).
constexpr uint64_t kCallsFromCache = 100;
// The services' longest wait between reconnects (ClientOptions::backoff),
// short so that the test's outage of a few seconds ends in one.
constexpr char kBackoffMax[] = "2s";
constexpr absl::Duration kWait = absl::Seconds(30);

// What a deploy_stub said of a table it started to use.
struct TableLine {
  int64_t now_nanos = 0;
  uint64_t generation = 0;
  bool from_cache = false;
  std::vector<std::string> backends;
  uint64_t watch_connected = 0;
};

absl::StatusOr<TableLine> ParseTableLine(const std::string& line) {
  TableLine t;
  int from_cache = 0;
  if (!absl::SimpleAtoi(aside::testing::LogField(line, "now_ns"),
                        &t.now_nanos) ||
      !absl::SimpleAtoi(aside::testing::LogField(line, "generation"),
                        &t.generation) ||
      !absl::SimpleAtoi(aside::testing::LogField(line, "from_cache"),
                        &from_cache) ||
      !absl::SimpleAtoi(aside::testing::LogField(line, "watch_connected"),
                        &t.watch_connected)) {
    return absl::InternalError(absl::StrCat("bad table line: ", line));
  }
  t.from_cache = from_cache != 0;
  t.backends = absl::StrSplit(aside::testing::LogField(line, "backends"), ',',
                              absl::SkipEmpty());
  return t;
}

class StubOutageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kBackends; ++i) {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<BackendProcess> b,
                           BackendProcess::Start());
      backends_.push_back(std::move(b));
    }
  }

  // Stops the stubs, then Aside with SIGTERM: it must exit cleanly (and,
  // in sanitizer builds, without reports) after serving them.
  void TearDown() override {
    stubs_.clear();
    EXPECT_OK(aside::testing::StopServer(server_, kWait));
  }

  std::string Target() const { return "unix:" + dir_.path() + "/aside.sock"; }
  std::string CacheDir(int stub) const {
    return absl::StrCat(dir_.path(), "/cache-", stub);
  }
  std::string StubName(int stub) const { return absl::StrCat("stub-", stub); }

  // Writes the config file: group web of the given backends.
  void WriteConfig(const std::vector<int>& members) {
    std::string backends;
    for (int i : members) {
      absl::StrAppend(&backends, "      - ", backends_[i]->address(), "\n");
    }
    config_ = dir_.WriteFile(
        "aside.yaml",
        absl::StrCat("load_reports: {auth: open}\n", "groups:\n",
                     "  - name: ", kGroup, "\n", "    policy: round_robin\n",
                     "    health_check: {kind: none}\n", "    backends:\n",
                     backends));
  }

  absl::Status StartAside() {
    absl::StatusOr<RunningServer> s = aside::testing::StartServer(
        dir_.path() + "/state", {"--config", config_, "--listen", Target()});
    if (!s.ok()) {
      return s.status();
    }
    server_ = *std::move(s);
    return absl::OkStatus();
  }

  // The outage: the server ends at once, as a crashed or evicted replica.
  void StopAside() {
    server_.process->Signal(SIGKILL);
    ASSERT_TRUE(server_.process->Wait(kWait).has_value());
    server_.process.reset();
  }

  void StartStubs() {
    stubs_.clear();
    for (int i = 0; i < kStubs; ++i) {
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<Process> p,
          StartChild({ASIDE_DEPLOY_STUB_BIN, "--aside", Target(), "--group",
                      kGroup, "--name", StubName(i), "--rate",
                      absl::StrCat(kStubCallsPerSecond), "--cache_dir",
                      CacheDir(i), "--backoff_max", kBackoffMax}));
      stubs_.push_back(std::move(p));
    }
    for (auto& s : stubs_) {
      ASSERT_OK(s->WaitForLine("event=client.started", kWait));
    }
  }

  // SIGTERM: each writes its totals and exits 0.
  std::vector<ClientTotals> StopStubs() {
    std::vector<ClientTotals> out;
    for (auto& s : stubs_) {
      s->Signal(SIGTERM);
      const std::optional<int> status = s->Wait(kWait);
      EXPECT_TRUE(status.has_value() && WIFEXITED(*status) &&
                  WEXITSTATUS(*status) == 0)
          << s->StderrText();
      s->DrainStderr(absl::Seconds(5));
      out.push_back(aside::testing::TotalsOf(*s));
    }
    stubs_.clear();
    return out;
  }

  // The next table stub `i` uses.
  TableLine NextTable(int i) {
    absl::StatusOr<std::string> line =
        stubs_[i]->WaitForLine("event=table ", kWait);
    EXPECT_OK(line.status());
    if (!line.ok()) {
      return {};
    }
    absl::StatusOr<TableLine> t = ParseTableLine(*line);
    EXPECT_OK(t.status());
    return t.ok() ? *t : TableLine();
  }

  std::vector<std::string> Addresses(const std::vector<int>& members) const {
    std::vector<std::string> out;
    for (int i : members) {
      out.push_back(backends_[i]->address());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void PollBackends() {
    for (auto& b : backends_) {
      b->Poll();
    }
    for (auto& s : stubs_) {
      s->ReadAvailable();
    }
  }

  TempDir dir_;
  std::string config_;
  RunningServer server_;
  std::vector<std::unique_ptr<BackendProcess>> backends_;
  std::vector<std::unique_ptr<Process>> stubs_;
};

TEST_F(StubOutageTest, RestartedStubsServeTheCacheThenFollowTheServer) {
  WriteConfig({0, 1});
  ASSERT_OK(StartAside());
  StartStubs();
  // Each service gets the server's table and keeps it on disk.
  for (int i = 0; i < kStubs; ++i) {
    const TableLine t = NextTable(i);
    EXPECT_FALSE(t.from_cache) << StubName(i);
    EXPECT_EQ(t.backends, Addresses({0, 1})) << StubName(i);
    const std::string file =
        client_internal::CacheFilePath(CacheDir(i), kGroup);
    ASSERT_TRUE(aside::testing::Eventually(
        [&] {
          struct stat st;
          return stat(file.c_str(), &st) == 0;
        },
        kWait))
        << file << " was never written";
  }
  for (const ClientTotals& t : StopStubs()) {
    EXPECT_EQ(t.failed, 0u) << absl::StrJoin(t.failures, "\n");
  }

  // Every Aside server stops; the deploy goes on meanwhile: backend 0
  // leaves the group and backend 2 joins (in the config Aside will read).
  StopAside();
  WriteConfig({1, 2});

  // The services restart with no server to ask: each serves its cached
  // table, and no call fails.
  StartStubs();
  std::vector<uint64_t> served_from_cache;
  for (int i = 0; i < kStubs; ++i) {
    const TableLine t = NextTable(i);
    EXPECT_TRUE(t.from_cache) << StubName(i);
    EXPECT_EQ(t.backends, Addresses({0, 1})) << StubName(i);
  }
  for (int i = 0; i < kStubs; ++i) {
    ASSERT_TRUE(aside::testing::Eventually(
        [&] {
          stubs_[i]->ReadAvailable();
          return aside::testing::TotalsOf(*stubs_[i]).ok >= kCallsFromCache;
        },
        kWait))
        << StubName(i) << ":\n"
        << stubs_[i]->StderrText();
  }

  // Aside returns with the changed group: the first stream each service
  // opens brings the server's table, which replaces the cached one.
  const int64_t back = MonotonicNanos();
  ASSERT_OK(StartAside());
  std::vector<int64_t> converged_ms;
  std::vector<int64_t> converged_at(kStubs);
  for (int i = 0; i < kStubs; ++i) {
    const TableLine t = NextTable(i);
    EXPECT_FALSE(t.from_cache) << StubName(i);
    EXPECT_EQ(t.backends, Addresses({1, 2})) << StubName(i);
    EXPECT_EQ(t.watch_connected, 1u)
        << StubName(i) << " took more than one stream to get the table";
    converged_at[i] = t.now_nanos;
    converged_ms.push_back((t.now_nanos - back) / 1'000'000);
  }
  // They call the new backend, and none calls the one that left.
  ASSERT_TRUE(aside::testing::Eventually(
      [&] {
        PollBackends();
        for (int i = 0; i < kStubs; ++i) {
          if (backends_[2]->Calls(StubName(i)).count < 10) {
            return false;
          }
        }
        return true;
      },
      kWait));
  for (int i = 0; i < kStubs; ++i) {
    EXPECT_LT(backends_[0]->Calls(StubName(i)).last_nanos, converged_at[i])
        << StubName(i) << " called the removed backend after the new table";
  }

  const std::vector<ClientTotals> totals = StopStubs();
  uint64_t ok = 0;
  uint64_t failed = 0;
  uint64_t from_cache = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    ok += totals[i].ok;
    failed += totals[i].failed;
    from_cache += totals[i].from_cache;
    EXPECT_EQ(totals[i].failed, 0u) << StubName(static_cast<int>(i)) << ":\n"
                                    << absl::StrJoin(totals[i].failures, "\n");
    EXPECT_GE(totals[i].from_cache, kCallsFromCache);
  }
  RecordProperty("calls_after_restart", static_cast<int>(ok));
  RecordProperty("failed_calls_after_restart", static_cast<int>(failed));
  RecordProperty("calls_from_cache", static_cast<int>(from_cache));
  RecordProperty("converged_after_aside_ms", absl::StrJoin(converged_ms, " "));
  std::cout << "stubs restarted during the outage: " << ok << " calls ("
            << from_cache << " from the cached table), " << failed
            << " failed; each took the server's table on its first stream, "
            << absl::StrJoin(converged_ms, " ms, ")
            << " ms after Aside started\n";
}

}  // namespace
}  // namespace aside
