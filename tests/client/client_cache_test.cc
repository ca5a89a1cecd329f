// The stub's table cache (ClientOptions::cache_dir) over real gRPC on
// loopback: a stub restarted while no server answers picks from the table
// its previous life wrote, a server's table replaces it, and damaged,
// foreign or old files are refused with one log line each.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/table_cache.h"
#include "lib/clock.h"
#include "tests/client/fake_lookaside.h"
#include "tests/client/log_sink.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::FakeServer;
using ::aside::testing::LogSink;
using ::aside::testing::StatusIs;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

v1::GroupUpdate Full(const std::string& group, uint64_t generation,
                     const std::string& server_id,
                     const std::vector<std::string>& addresses) {
  v1::GroupUpdate u;
  u.set_group(group);
  u.set_generation(generation);
  u.set_server_id(server_id);
  u.mutable_full()->mutable_policy()->mutable_round_robin();
  for (const std::string& address : addresses) {
    v1::TableBackend* b = u.mutable_full()->add_backends();
    b->mutable_backend()->set_address(address);
    b->mutable_backend()->set_weight(100);
    b->set_effective_weight(100);
    b->set_ready(true);
    b->set_health(v1::HEALTH_STATE_HEALTHY);
  }
  return u;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class TableCacheTest : public ::testing::Test {
 protected:
  ClientOptions Options(const std::vector<std::string>& targets,
                        FakeClock* clock, LogSink* log) {
    ClientOptions o;
    o.targets = targets;
    o.backoff.initial = absl::Milliseconds(50);
    o.backoff.max = absl::Milliseconds(200);
    o.report_interval = absl::ZeroDuration();
    o.reporter = "cache-test";
    o.cache_dir = cache_dir_;
    o.clock = clock;
    o.log = log->fn();
    return o;
  }

  // Runs a stub against a live fake server until it has written `group`'s
  // table at `generation` with `addresses`, then shuts the server down: its
  // target answers no more. Returns that target.
  std::string WriteCacheAndStopServer(
      const std::string& group, uint64_t generation,
      const std::vector<std::string>& addresses) {
    FakeServer fake;
    fake.Start();
    FakeClock clock;
    LogSink log;
    auto client = Client::Create(Options({fake.target()}, &clock, &log));
    EXPECT_OK(client);
    fake.service.Push(Full(group, generation, "aside-a", addresses));
    EXPECT_TRUE((*client)->Group(group)->WaitForGeneration(generation, kWait));
    // The file is written before the generation shows.
    EXPECT_EQ((*client)->stats().cache_writes, 1u);
    client->reset();
    return fake.target();  // ~FakeServer shuts it down
  }

  std::string Path(const std::string& group) const {
    return client_internal::CacheFilePath(cache_dir_, group);
  }

  // A stub that finds `web`'s file refused for `reason`: nothing serves,
  // and one log line names the file and the reason.
  void ExpectRefused(const std::string& target, FakeClock* clock,
                     const std::string& reason) {
    LogSink log;
    ClientOptions options = Options({target}, clock, &log);
    options.wait_for_table = absl::ZeroDuration();
    ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
    ClientGroup* web = client->Group("web");
    EXPECT_EQ(log.Count("event=client.cache_refused"), 1);
    EXPECT_EQ(log.Count(absl::StrCat("event=client.cache_refused group=web "
                                     "file=",
                                     Path("web"))),
              1);
    EXPECT_EQ(log.Count(reason), 1) << reason;
    EXPECT_EQ(client->stats().cache_refused, 1u);
    EXPECT_EQ(client->stats().tables_from_cache, 0u);
    EXPECT_FALSE(web->from_cache());
    EXPECT_EQ(web->table(), nullptr);
    EXPECT_THAT(web->Pick(),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("web")));
    EXPECT_EQ(log.Count("event=client.table_from_cache"), 0);
  }

  TempDir temp_;
  // Not there yet: the stub creates it.
  const std::string cache_dir_ = temp_.path() + "/cache/stub";
};

TEST_F(TableCacheTest, ARestartedStubPicksFromTheCacheWhenNoServerAnswers) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001", "127.0.0.1:8002"});

  FakeClock clock;
  LogSink log;
  ClientOptions options = Options({target}, &clock, &log);
  options.cache_wait = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  EXPECT_FALSE(web->from_cache());  // a server may still answer

  // The first pick waits cache_wait (on the stub's clock) for a server,
  // then takes the cached table.
  absl::StatusOr<PickHandle> first = absl::UnknownError("not returned");
  std::thread picker([&] { first = web->Pick(); });
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.table_waits == 1; }, kWait));
  clock.Advance(absl::Seconds(1));
  picker.join();
  ASSERT_OK(first);
  EXPECT_TRUE(first->from_cache());
  EXPECT_EQ(first->generation(), 7u);
  first->Done(true);

  std::set<std::string> seen;
  int failed = 0;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<PickHandle> pick = web->Pick();
    if (!pick.ok()) {
      ++failed;
      continue;
    }
    EXPECT_TRUE(pick->from_cache());
    seen.insert(std::string(pick->address()));
    pick->Done(true);
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(seen, (std::set<std::string>{"127.0.0.1:8001", "127.0.0.1:8002"}));
  EXPECT_TRUE(web->from_cache());
  EXPECT_EQ(web->table()->generation(), 7u);
  EXPECT_EQ(web->generation(), 0u);  // nothing from a server yet
  EXPECT_EQ(client->stats().tables_from_cache, 1u);
  EXPECT_EQ(client->stats().cache_refused, 0u);
  EXPECT_EQ(log.Count("event=client.table_from_cache group=web generation=7 "
                      "age_s=1 file="),
            1);
}

TEST_F(TableCacheTest, TheWatchThreadServesTheCacheWithoutAPick) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  FakeClock clock;
  LogSink log;
  ClientOptions options = Options({target}, &clock, &log);
  options.groups = {"web"};
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  // Connection attempts fail; once cache_wait has passed the watcher
  // serves the cached table, so a readiness check on table() passes.
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.watch_attempts >= 1; }, kWait));
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.tables_from_cache == 1; }, kWait));
  ClientGroup* web = client->Group("web");
  EXPECT_TRUE(web->from_cache());
  ASSERT_NE(web->table(), nullptr);
  EXPECT_EQ(web->table()->generation(), 7u);
}

TEST_F(TableCacheTest, TheServersTableReplacesTheCachedOne) {
  const std::string gone =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  // The restarted stub has a live replica and the old one (down); the
  // file's targets share one with them.
  FakeServer live;
  live.Start();
  FakeClock clock;
  LogSink log;
  ClientOptions options = Options({live.target(), gone}, &clock, &log);
  options.cache_wait = absl::ZeroDuration();  // serve the cache at once
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  ASSERT_TRUE(web->from_cache());
  {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    EXPECT_EQ(pick.address(), "127.0.0.1:8001");
    EXPECT_TRUE(pick.from_cache());
    pick.Done(true);
  }

  // Another server, an older generation, other backends: taken as is.
  live.service.Push(Full("web", 3, "aside-b", {"127.0.0.1:9001"}));
  ASSERT_TRUE(web->WaitForGeneration(3, kWait));
  EXPECT_FALSE(web->from_cache());
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    EXPECT_EQ(pick.address(), "127.0.0.1:9001");
    EXPECT_FALSE(pick.from_cache());
    pick.Done(true);
  }
  EXPECT_EQ(log.Count("event=client.table_from_server group=web generation=3 "
                      "server_id=aside-b replaces_cached_generation=7"),
            1);

  // The file now holds the server's table; a confirmation of the same
  // generation writes nothing, a new generation does.
  EXPECT_EQ(client->stats().cache_writes, 1u);
  live.service.Push(Full("web", 3, "aside-b", {"127.0.0.1:9001"}));
  live.service.Push(Full("web", 4, "aside-b", {"127.0.0.1:9002"}));
  ASSERT_TRUE(web->WaitForGeneration(4, kWait));
  EXPECT_EQ(client->stats().cache_writes, 2u);
  EXPECT_EQ(client->stats().cache_write_failures, 0u);
  EXPECT_THAT(ReadAll(Path("web")), HasSubstr("\ngeneration 4\n"));
}

TEST_F(TableCacheTest, TheCacheTakesTheFallbackListsPlace) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  FakeClock clock;
  LogSink log;
  ClientOptions options = Options({target}, &clock, &log);
  options.fallback["web"] = {"127.0.0.1:7001"};
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  // No wait: with a fallback list picks never wait, and the cached table
  // is the better list.
  ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
  EXPECT_EQ(pick.address(), "127.0.0.1:8001");
  EXPECT_TRUE(pick.from_cache());
  EXPECT_FALSE(pick.from_fallback());
  pick.Done(true);
}

TEST_F(TableCacheTest, FilesAreOwnerOnly) {
  WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  struct stat st;
  ASSERT_EQ(stat(Path("web").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(cache_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // No temporary file is left behind.
  std::vector<std::string> names;
  DIR* dir = opendir(cache_dir_.c_str());
  ASSERT_NE(dir, nullptr);
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') {
      names.emplace_back(entry->d_name);
    }
  }
  closedir(dir);
  EXPECT_THAT(names, ::testing::ElementsAre("web.table"));
}

TEST_F(TableCacheTest, ATruncatedFileIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  const std::string bytes = ReadAll(Path("web"));
  WriteAll(Path("web"), bytes.substr(0, bytes.size() - 5));
  FakeClock clock;
  ExpectRefused(target, &clock, "reason=\"truncated: ");
}

TEST_F(TableCacheTest, AFileWithOneBitFlippedIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  std::string bytes = ReadAll(Path("web"));
  bytes[bytes.size() - 3] ^= 0x04;  // in the payload
  WriteAll(Path("web"), bytes);
  FakeClock clock;
  ExpectRefused(target, &clock, "reason=\"checksum mismatch");
}

TEST_F(TableCacheTest, AFlippedBitInTheHeaderIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  std::string bytes = ReadAll(Path("web"));
  const size_t at = bytes.find("\ngeneration 7\n");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 12] ^= 0x01;  // generation 6
  WriteAll(Path("web"), bytes);
  FakeClock clock;
  ExpectRefused(target, &clock, "reason=\"checksum mismatch");
}

TEST_F(TableCacheTest, AnotherGroupsFileIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("api", 7, {"127.0.0.1:8001"});
  ASSERT_EQ(std::rename(Path("api").c_str(), Path("web").c_str()), 0);
  FakeClock clock;
  ExpectRefused(target, &clock, "reason=\"written for group 'api'\"");
}

TEST_F(TableCacheTest, AnotherFormatIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  std::string bytes = ReadAll(Path("web"));
  bytes.replace(0, std::string("aside-table-cache 1").size(),
                "aside-table-cache 2");
  WriteAll(Path("web"), bytes);
  FakeClock clock;
  ExpectRefused(target, &clock,
                "reason=\"format version '2'; this build reads version 1\"");
}

TEST_F(TableCacheTest, AFileForOtherServersIsRefused) {
  WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  FakeClock clock;
  ExpectRefused(absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort()),
                &clock, "none of which is configured");
}

TEST_F(TableCacheTest, AFileWritableByOthersIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  ASSERT_EQ(chmod(Path("web").c_str(), 0622), 0);
  FakeClock clock;
  ExpectRefused(target, &clock, "reason=\"mode 0622: writable by other users");
}

TEST_F(TableCacheTest, AFileOlderThanTheMaximumAgeIsRefused) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  // Written at the fake clock's start; read 24 h and 1 s later.
  FakeClock clock;
  clock.Advance(absl::Hours(24) + absl::Seconds(1));
  ExpectRefused(target, &clock, "ago, older than cache_max_age 24h\"");
}

TEST_F(TableCacheTest, AFileJustYoungerThanTheMaximumAgeServes) {
  const std::string target =
      WriteCacheAndStopServer("web", 7, {"127.0.0.1:8001"});
  FakeClock clock;
  clock.Advance(absl::Hours(24));
  LogSink log;
  ClientOptions options = Options({target}, &clock, &log);
  options.cache_wait = absl::ZeroDuration();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  EXPECT_TRUE(web->from_cache());
  EXPECT_EQ(log.Count("age_s=86400 "), 1);
}

TEST_F(TableCacheTest, AFailedWriteIsCountedLoggedOnceAndPicksGoOn) {
  FakeServer fake;
  fake.Start();
  FakeClock clock;
  LogSink log;
  ClientOptions options = Options({fake.target()}, &clock, &log);
  // A directory that cannot be created: its parent is a file.
  options.cache_dir = temp_.WriteFile("not-a-dir", "") + "/cache";
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, "aside-a", {"127.0.0.1:8001"}));
  fake.service.Push(Full("web", 2, "aside-a", {"127.0.0.1:8002"}));
  ASSERT_TRUE(web->WaitForGeneration(2, kWait));
  ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
  EXPECT_EQ(pick.address(), "127.0.0.1:8002");
  pick.Done(true);
  EXPECT_EQ(client->stats().cache_write_failures, 2u);
  EXPECT_EQ(client->stats().cache_writes, 0u);
  EXPECT_EQ(log.Count("event=client.cache_write_failed group=web "
                      "generation=1 file="),
            1);
  EXPECT_EQ(log.Count("event=client.cache_write_failed"), 1);
}

// Below the stub: the decoder over every damaged variant of one file.
TEST(TableCacheFileTest, EveryTruncationAndEveryBitFlipIsRefused) {
  client_internal::CacheRecord record;
  record.update = Full("web", 7, "aside-a", {"127.0.0.1:8001"});
  record.targets = {"127.0.0.1:50051"};
  record.written = absl::FromUnixSeconds(1'800'000'000);
  const std::string file = client_internal::EncodeCacheFile(record);
  client_internal::CacheExpectation expect;
  expect.group = "web";
  expect.targets = record.targets;
  expect.now = record.written + absl::Minutes(1);
  expect.max_age = absl::Hours(24);
  ASSERT_OK_AND_ASSIGN(client_internal::CachedTable intact,
                       client_internal::DecodeCacheFile(file, expect));
  EXPECT_EQ(intact.spec.generation, 7u);
  EXPECT_EQ(intact.spec.members.size(), 1u);
  EXPECT_EQ(intact.record.update.server_id(), "aside-a");
  EXPECT_EQ(intact.age, absl::Minutes(1));

  for (size_t n = 0; n < file.size(); ++n) {
    EXPECT_THAT(client_internal::DecodeCacheFile(file.substr(0, n), expect),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("")))
        << "prefix of " << n << " bytes";
  }
  for (size_t i = 0; i < file.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = file;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      EXPECT_THAT(
          client_internal::DecodeCacheFile(flipped, expect),
          StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("")))
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST_F(TableCacheTest, BadOptionsAreRejected) {
  ClientOptions options;
  options.targets = {"127.0.0.1:1"};
  options.cache_max_age = absl::ZeroDuration();
  EXPECT_THAT(
      Client::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache_max_age")));
  options.cache_max_age = absl::Hours(1);
  options.cache_wait = -absl::Seconds(1);
  EXPECT_THAT(
      Client::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache_wait")));
}

}  // namespace
}  // namespace aside
