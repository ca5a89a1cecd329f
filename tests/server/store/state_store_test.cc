#include "server/store/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "server/config/config.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint64_t kCap = uint64_t{1} << 30;

TEST(StateStoreTest, RoundTripsGroupsFloorAndKey) {
  TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kCap));
    v1::Group g;
    g.set_name("web");
    g.add_backends()->set_address("10.0.0.1:80");
    ASSERT_OK(store->PutGroup(g, 41));
    g.set_name("api");
    ASSERT_OK(store->PutGroup(g, 42));
    ASSERT_OK(store->DeleteGroup("web", 43));
    ASSERT_OK(store->SetSessionKey("0123456789abcdef0123"));
    ASSERT_OK(store->RaiseGenerationFloor(10));  // never lowers
  }
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kCap));
  ASSERT_OK_AND_ASSIGN(StateStore::Contents c, store->Load());
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups[0].name(), "api");
  EXPECT_EQ(c.groups[0].backends(0).address(), "10.0.0.1:80");
  EXPECT_EQ(c.generation_floor, 44u);
  EXPECT_EQ(c.session_key, "0123456789abcdef0123");
  ASSERT_OK_AND_ASSIGN(std::string integrity, store->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

// Group commit: one transaction, each write made or refused on its own.
TEST(StateStoreTest, ABatchRefusesAWritePastTheCapAloneAndCommitsTheRest) {
  TempDir dir;
  // The smallest cap (16 pages): room for small groups, not for one with
  // a megabyte of metadata.
  constexpr uint64_t kSmallCap = 1;
  {
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kSmallCap));
    v1::Group old;
    old.set_name("old");
    ASSERT_OK(store->PutGroup(old, 1));
    v1::Group a, big, b;
    a.set_name("a");
    a.add_backends()->set_address("10.0.0.1:80");
    big.set_name("big");
    (*big.add_backends()->mutable_metadata())["blob"] =
        std::string(1 << 20, 'x');
    b.set_name("b");
    b.add_backends()->set_address("10.0.0.2:80");
    const std::vector<absl::Status> results =
        store->WriteBatch({{.name = "a", .definition = &a},
                           {.name = "big", .definition = &big},
                           {.name = "old"},
                           {.name = "b", .definition = &b}});
    ASSERT_EQ(results.size(), 4u);
    EXPECT_OK(results[0]);
    EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kResourceExhausted,
                                     HasSubstr("state store")));
    EXPECT_OK(results[2]);
    EXPECT_OK(results[3]);
  }
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kSmallCap));
  ASSERT_OK_AND_ASSIGN(StateStore::Contents c, store->Load());
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.groups[0].name(), "a");
  EXPECT_EQ(c.groups[1].name(), "b");
  ASSERT_OK_AND_ASSIGN(std::string integrity, store->IntegrityCheck());
  EXPECT_EQ(integrity, "ok");
}

TEST(StateStoreTest, UsesWalAndFullSync) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kCap));
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/aside.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)),
               "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(StateStoreTest, CorruptDatabaseRefusesToOpenNamingThePath) {
  TempDir dir;
  dir.WriteFile("aside.db", std::string(8192, 'x'));
  EXPECT_THAT(StateStore::Open(dir.path(), kCap),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(dir.path() + "/aside.db")));
}

TEST(StateStoreTest, TruncatedDatabaseRefusesToOpen) {
  TempDir dir;
  {
    ASSERT_OK_AND_ASSIGN(auto store, StateStore::Open(dir.path(), kCap));
    v1::Group g;
    g.set_name("web");
    for (int i = 0; i < 200; ++i) {
      g.add_backends()->set_address(absl::StrCat("10.0.", i, ".1:80"));
    }
    ASSERT_OK(store->PutGroup(g, 1));
  }
  // Fold the WAL into the main file, then damage a page in the middle.
  sqlite3* db = nullptr;
  sqlite3_open((dir.path() + "/aside.db").c_str(), &db);
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr,
               nullptr);
  sqlite3_close(db);
  const std::string path = dir.path() + "/aside.db";
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 8192u);
  FILE* f = fopen(path.c_str(), "r+b");
  fseek(f, 4096, SEEK_SET);  // the b-tree header of page 2
  const std::string junk(2000, '\x5a');
  fwrite(junk.data(), 1, junk.size(), f);
  fclose(f);
  EXPECT_THAT(StateStore::Open(dir.path(), kCap),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(path)));
}

TEST(StateStoreTest, NewerSchemaRefusesToOpen) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/aside.db").c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_THAT(StateStore::Open(dir.path(), kCap),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("schema version 99 is newer")));
}

TEST(StateStoreTest, UncreatableDirectoryRefusesToOpen) {
  TempDir dir;
  const std::string file = dir.WriteFile("not-a-dir", "x");
  EXPECT_THAT(StateStore::Open(file + "/state", kCap),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(file + "/state")));
}

TEST(StateStoreTest, ServerStartupFailsOnACorruptStore) {
  TempDir dir;
  dir.WriteFile("state/aside.db", std::string(4096, '\x01'));
  absl::StatusOr<ServerConfig> config = ParseConfig(
      absl::StrCat("state_dir: ", dir.path(), "/state\n"), "t.yaml");
  ASSERT_OK(config);
  EXPECT_THAT(AsideServer::Create(*config),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(dir.path() + "/state/aside.db")));
}

}  // namespace
}  // namespace aside::server
