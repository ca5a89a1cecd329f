// The stub's handling of Watch updates, fed crafted GroupUpdate messages:
// full tables, deltas, confirmations, server changes, and tables that fail
// validation (rejected whole, the previous table keeps serving).
#include "client/watched_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::testing::HasSubstr;
using Outcome = WatchedTable::Outcome;

v1::TableBackend* AddBackend(
    google::protobuf::RepeatedPtrField<v1::TableBackend>* list,
    const std::string& address, uint32_t weight, bool ready = true) {
  v1::TableBackend* b = list->Add();
  b->mutable_backend()->set_address(address);
  b->mutable_backend()->set_weight(weight);
  b->set_effective_weight(weight);
  b->set_ready(ready);
  b->set_health(v1::HEALTH_STATE_HEALTHY);
  return b;
}

v1::GroupUpdate Full(uint64_t generation, const std::string& server = "s1") {
  v1::GroupUpdate u;
  u.set_group("web");
  u.set_generation(generation);
  u.set_server_id(server);
  u.mutable_full()->mutable_policy()->mutable_weighted_round_robin();
  AddBackend(u.mutable_full()->mutable_backends(), "10.0.0.1:80", 100);
  AddBackend(u.mutable_full()->mutable_backends(), "10.0.0.2:80", 300);
  return u;
}

v1::GroupUpdate Delta(uint64_t base, uint64_t generation,
                      const std::string& server = "s1") {
  v1::GroupUpdate u;
  u.set_group("web");
  u.set_generation(generation);
  u.set_server_id(server);
  u.mutable_delta()->set_base_generation(base);
  return u;
}

TEST(WatchedTableTest, AppliesAFullTableThenDeltas) {
  LoadTracker loads;
  WatchedTable t("web", &loads);
  auto r = t.Apply(Full(10));
  ASSERT_EQ(r.outcome, Outcome::kApplied) << r.error;
  ASSERT_NE(t.table(), nullptr);
  EXPECT_EQ(t.generation(), 10u);
  EXPECT_EQ(t.server_id(), "s1");
  EXPECT_EQ(t.table()->size(), 2u);
  EXPECT_EQ(t.table()->policy().kind, PolicyKind::kWeightedRoundRobin);

  v1::GroupUpdate d = Delta(10, 11);
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.3:80", 50);
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.1:80", 100,
             /*ready=*/false);
  d.mutable_delta()->add_removed("10.0.0.2:80");
  r = t.Apply(d);
  ASSERT_EQ(r.outcome, Outcome::kApplied) << r.error;
  EXPECT_EQ(t.generation(), 11u);
  ASSERT_EQ(t.table()->size(), 2u);
  EXPECT_EQ(t.table()->member(0).backend.address, "10.0.0.1:80");
  EXPECT_FALSE(t.table()->eligible(0));
  EXPECT_EQ(t.table()->member(1).backend.address, "10.0.0.3:80");
  EXPECT_EQ(t.table()->member(1).weight, 50u);
  // The policy was not in the delta: kept.
  EXPECT_EQ(t.table()->policy().kind, PolicyKind::kWeightedRoundRobin);

  v1::GroupUpdate p = Delta(11, 12);
  p.mutable_delta()->mutable_policy()->mutable_round_robin();
  ASSERT_EQ(t.Apply(p).outcome, Outcome::kApplied);
  EXPECT_EQ(t.table()->policy().kind, PolicyKind::kRoundRobin);
}

// A delta applies to the held table's members (sorted by address, no
// sort): removals and additions anywhere in the order, upserts in place,
// and the members it does not name keep what they had (weight, readiness,
// drain).
TEST(WatchedTableTest, DeltasKeepEveryOtherMemberAsItWas) {
  LoadTracker loads;
  WatchedTable t("web", &loads);
  v1::GroupUpdate full = Full(1);
  full.mutable_full()->clear_backends();
  auto* list = full.mutable_full()->mutable_backends();
  for (const char* address : {"10.0.0.9:80", "10.0.0.3:80", "10.0.0.7:80",
                              "10.0.0.1:80", "10.0.0.5:80"}) {
    AddBackend(list, address, 100);
  }
  (*list)[2].set_ready(false);                      // 10.0.0.7
  (*list)[4].mutable_backend()->set_drained(true);  // 10.0.0.5
  ASSERT_EQ(t.Apply(full).outcome, Outcome::kApplied);

  v1::GroupUpdate d = Delta(1, 2);
  d.mutable_delta()->add_removed("10.0.0.3:80");
  d.mutable_delta()->add_removed("10.0.0.9:80");
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.8:80", 20);
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.0:80", 30);
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.4:80", 40);
  AddBackend(d.mutable_delta()->mutable_upserted(), "10.0.0.1:80", 50);
  const auto r = t.Apply(d);
  ASSERT_EQ(r.outcome, Outcome::kApplied) << r.error;
  std::vector<std::string> addresses;
  for (const Member& m : t.table()->members()) {
    addresses.push_back(m.backend.address);
  }
  EXPECT_THAT(addresses, ::testing::ElementsAre("10.0.0.0:80", "10.0.0.1:80",
                                                "10.0.0.4:80", "10.0.0.5:80",
                                                "10.0.0.7:80", "10.0.0.8:80"));
  const Table& table = *t.table();
  EXPECT_EQ(table.member(1).weight, 50u);  // upserted in place
  EXPECT_TRUE(table.member(3).backend.drained);
  EXPECT_FALSE(table.eligible(3));
  EXPECT_FALSE(table.member(4).ready);
  EXPECT_FALSE(table.eligible(4));
  EXPECT_EQ(table.member(4).weight, 100u);
  EXPECT_EQ(table.eligible_count(), 4u);

  // A further delta leaves the drained and unready members as they were.
  v1::GroupUpdate again = Delta(2, 3);
  AddBackend(again.mutable_delta()->mutable_upserted(), "10.0.0.8:80", 25);
  ASSERT_EQ(t.Apply(again).outcome, Outcome::kApplied);
  EXPECT_FALSE(t.table()->eligible(3));
  EXPECT_FALSE(t.table()->eligible(4));
  EXPECT_EQ(t.table()->member(5).weight, 25u);
}

TEST(WatchedTableTest, LoadSurvivesATableSwap) {
  LoadTracker loads;
  WatchedTable t("web", &loads);
  ASSERT_EQ(t.Apply(Full(1)).outcome, Outcome::kApplied);
  BackendLoad* before = t.table()->member(0).load;
  before->Start();
  ASSERT_EQ(t.Apply(Full(2)).outcome, Outcome::kApplied);
  EXPECT_EQ(t.table()->member(0).load, before);
  EXPECT_EQ(t.table()->member(0).load->in_flight(), 1);
}

TEST(WatchedTableTest, AnEmptyDeltaAtTheHeldGenerationConfirmsIt) {
  WatchedTable t("web", nullptr);
  ASSERT_EQ(t.Apply(Full(7)).outcome, Outcome::kApplied);
  const Table* held = t.table().get();
  EXPECT_EQ(t.Apply(Delta(7, 7)).outcome, Outcome::kUnchanged);
  EXPECT_EQ(t.table().get(), held);
}

TEST(WatchedTableTest, GenerationsNeverGoBackwardsWithinOneServer) {
  WatchedTable t("web", nullptr);
  ASSERT_EQ(t.Apply(Full(20)).outcome, Outcome::kApplied);
  EXPECT_EQ(t.Apply(Full(19)).outcome, Outcome::kStale);
  EXPECT_EQ(t.Apply(Full(20)).outcome, Outcome::kUnchanged);
  EXPECT_EQ(t.Apply(Delta(18, 19)).outcome, Outcome::kStale);
  EXPECT_EQ(t.generation(), 20u);
}

TEST(WatchedTableTest, ANewServerIdStartsANewSequence) {
  WatchedTable t("web", nullptr);
  ASSERT_EQ(t.Apply(Full(500, "old")).outcome, Outcome::kApplied);
  // A restarted server (or another replica) may be at any generation; its
  // first full table is taken as is.
  auto r = t.Apply(Full(3, "new"));
  ASSERT_EQ(r.outcome, Outcome::kApplied) << r.error;
  EXPECT_EQ(t.generation(), 3u);
  EXPECT_EQ(t.server_id(), "new");
}

TEST(WatchedTableTest, DeltasThatDoNotFitAskForAFullTable) {
  WatchedTable t("web", nullptr);
  // Nothing held yet.
  EXPECT_EQ(t.Apply(Delta(4, 5)).outcome, Outcome::kNeedFull);
  ASSERT_EQ(t.Apply(Full(5)).outcome, Outcome::kApplied);
  // Another base.
  EXPECT_EQ(t.Apply(Delta(6, 7)).outcome, Outcome::kNeedFull);
  // Another server, even at the same generation.
  EXPECT_EQ(t.Apply(Delta(5, 5, "other")).outcome, Outcome::kNeedFull);
  EXPECT_EQ(t.Apply(Delta(5, 6, "other")).outcome, Outcome::kNeedFull);
  EXPECT_EQ(t.generation(), 5u);
}

struct BadTable {
  const char* name;
  std::function<void(v1::GroupUpdate*)> corrupt;
  const char* error;
};

class WatchedTableRejectTest : public ::testing::TestWithParam<BadTable> {};

TEST_P(WatchedTableRejectTest, IsRejectedWholeAndThePreviousTableServes) {
  LoadTracker loads;
  WatchedTable t("web", &loads);
  ASSERT_EQ(t.Apply(Full(1)).outcome, Outcome::kApplied);
  const TableConstPtr held = t.table();

  // As a full table...
  v1::GroupUpdate full = Full(2);
  GetParam().corrupt(&full);
  auto r = t.Apply(full);
  EXPECT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_THAT(r.error.message(), HasSubstr(GetParam().error));
  EXPECT_THAT(r.error.message(), HasSubstr("group 'web' generation 2"));
  EXPECT_EQ(t.table(), held);
  EXPECT_EQ(t.generation(), 1u);
  EXPECT_EQ(t.rejected(), 1u);

  // ... and the same content as a delta.
  v1::GroupUpdate delta = Delta(1, 3);
  *delta.mutable_delta()->mutable_upserted() = full.full().backends();
  if (full.full().has_policy()) {
    *delta.mutable_delta()->mutable_policy() = full.full().policy();
  }
  r = t.Apply(delta);
  EXPECT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_EQ(t.table(), held);
  EXPECT_EQ(t.rejected(), 2u);

  // A good table afterwards is taken.
  EXPECT_EQ(t.Apply(Full(4)).outcome, Outcome::kApplied);
  EXPECT_EQ(t.generation(), 4u);
}

INSTANTIATE_TEST_SUITE_P(
    BadTables, WatchedTableRejectTest,
    ::testing::Values(
        BadTable{"BadAddress",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()
                       ->mutable_backends(1)
                       ->mutable_backend()
                       ->set_address("10.0.0.2");
                 },
                 "backends[1].backend"},
        BadTable{"PortOutOfRange",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()
                       ->mutable_backends(0)
                       ->mutable_backend()
                       ->set_address("10.0.0.9:70000");
                 },
                 "backends[0].backend"},
        BadTable{"BackendWeightTooHigh",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()
                       ->mutable_backends(0)
                       ->mutable_backend()
                       ->set_weight(20000);
                 },
                 "weight"},
        BadTable{"EffectiveWeightTooHigh",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()->mutable_backends(0)->set_effective_weight(
                       10001);
                 },
                 "effective_weight"},
        BadTable{"DuplicateAddress",
                 [](v1::GroupUpdate* u) {
                   AddBackend(u->mutable_full()->mutable_backends(),
                              "10.0.0.1:80", 1);
                 },
                 "listed twice"},
        BadTable{"UnknownHealth",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()->mutable_backends(0)->set_health(
                       static_cast<v1::HealthState>(42));
                 },
                 "health"},
        BadTable{"BadPolicyParameter",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()
                       ->mutable_policy()
                       ->mutable_ketama()
                       ->set_points_per_weight(0);
                 },
                 "points_per_weight"},
        BadTable{"PolicyTheStubCannotPickWith",
                 [](v1::GroupUpdate* u) {
                   u->mutable_full()->mutable_policy()->mutable_sticky();
                 },
                 "sticky"}),
    [](const ::testing::TestParamInfo<BadTable>& info) {
      return info.param.name;
    });

TEST(WatchedTableTest, ADeltaRemovingAnUnknownAddressIsRejected) {
  WatchedTable t("web", nullptr);
  ASSERT_EQ(t.Apply(Full(1)).outcome, Outcome::kApplied);
  v1::GroupUpdate d = Delta(1, 2);
  d.mutable_delta()->add_removed("10.9.9.9:80");
  auto r = t.Apply(d);
  EXPECT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_THAT(r.error.message(), HasSubstr("delta.removed[0]"));
  EXPECT_EQ(t.table()->size(), 2u);
}

TEST(WatchedTableTest, RemovalKeepsTheTable) {
  WatchedTable t("web", nullptr);
  ASSERT_EQ(t.Apply(Full(1)).outcome, Outcome::kApplied);
  v1::GroupUpdate removed;
  removed.set_group("web");
  removed.set_generation(2);
  removed.set_server_id("s1");
  removed.mutable_removed()->set_reason("deleted");
  EXPECT_EQ(t.Apply(removed).outcome, Outcome::kRemoved);
  ASSERT_NE(t.table(), nullptr);
  EXPECT_EQ(t.generation(), 1u);
}

TEST(WatchedTableTest, UpdatesForAnotherGroupOrWithoutContentAreRejected) {
  WatchedTable t("web", nullptr);
  v1::GroupUpdate other = Full(1);
  other.set_group("api");
  EXPECT_EQ(t.Apply(other).outcome, Outcome::kRejected);
  v1::GroupUpdate empty;
  empty.set_group("web");
  EXPECT_EQ(t.Apply(empty).outcome, Outcome::kRejected);
  EXPECT_EQ(t.table(), nullptr);
}

TEST(WatchedTableTest, PanicFromTheServerIsFollowedExactly) {
  WatchedTable t("web", nullptr);
  v1::GroupUpdate u = Full(1);
  u.mutable_full()->mutable_backends(0)->set_ready(false);
  ASSERT_EQ(t.Apply(u).outcome, Outcome::kApplied);
  // No panic: only the ready backend is eligible.
  EXPECT_FALSE(t.table()->eligible(0));
  EXPECT_TRUE(t.table()->eligible(1));
  u.set_generation(2);
  u.mutable_full()->set_panic(true);
  ASSERT_EQ(t.Apply(u).outcome, Outcome::kApplied);
  EXPECT_TRUE(t.table()->panic());
  EXPECT_TRUE(t.table()->eligible(0));
  EXPECT_TRUE(t.table()->eligible(1));
}

}  // namespace
}  // namespace aside
