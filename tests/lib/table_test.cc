#include "lib/table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

Member MakeMember(std::string address, uint32_t weight = 100,
                  bool ready = true) {
  Member m;
  m.backend.address = std::move(address);
  m.backend.weight = weight;
  m.weight = weight;
  m.ready = ready;
  return m;
}

TEST(TableTest, SortsMembersAndFindsThem) {
  TableSpec spec;
  spec.group = "web";
  spec.members = {MakeMember("10.0.0.3:80"), MakeMember("10.0.0.1:80"),
                  MakeMember("10.0.0.2:80")};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t, Table::Create(spec, nullptr, nullptr));
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ(t->member(0).backend.address, "10.0.0.1:80");
  EXPECT_EQ(t->Find("10.0.0.2:80"), 1);
  EXPECT_EQ(t->Find("10.0.0.9:80"), -1);
}

TEST(TableTest, RejectsDuplicatesAndBadWeights) {
  TableSpec spec;
  spec.members = {MakeMember("10.0.0.1:80"), MakeMember("10.0.0.1:80")};
  EXPECT_THAT(
      Table::Create(spec, nullptr, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  spec.members = {MakeMember("10.0.0.1:80", 10001)};
  EXPECT_THAT(Table::Create(spec, nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out of range 0..10000")));
}

TEST(TableTest, EligibilityFollowsReadinessDrainAndWeight) {
  TableSpec spec;
  spec.panic_threshold = 0;
  spec.members = {MakeMember("10.0.0.1:80"), MakeMember("10.0.0.2:80", 0),
                  MakeMember("10.0.0.3:80", 100, false),
                  MakeMember("10.0.0.4:80")};
  spec.members[3].backend.drained = true;
  ASSERT_OK_AND_ASSIGN(TableConstPtr t, Table::Create(spec, nullptr, nullptr));
  EXPECT_TRUE(t->eligible(0));
  EXPECT_FALSE(t->eligible(1));  // weight 0
  EXPECT_FALSE(t->eligible(2));  // not ready
  EXPECT_FALSE(t->eligible(3));  // drained
  EXPECT_FALSE(t->member(3).ready);
  EXPECT_EQ(t->eligible_count(), 1u);
  EXPECT_FALSE(t->panic());
}

TEST(TableTest, PanicMakesEveryActiveMemberEligible) {
  TableSpec spec;
  spec.panic_threshold = 50;
  spec.members = {MakeMember("10.0.0.1:80"),
                  MakeMember("10.0.0.2:80", 100, false),
                  MakeMember("10.0.0.3:80", 100, false),
                  MakeMember("10.0.0.4:80", 0, false)};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t, Table::Create(spec, nullptr, nullptr));
  // 1 of 3 active members ready: 33% < 50%.
  EXPECT_TRUE(t->panic());
  EXPECT_TRUE(t->eligible(1));
  EXPECT_TRUE(t->eligible(2));
  EXPECT_FALSE(t->eligible(3));  // weight 0 stays out, even in panic
}

TEST(TableTest, PanicAtExactlyTheThresholdIsNotPanic) {
  TableSpec spec;
  spec.panic_threshold = 50;
  spec.members = {MakeMember("10.0.0.1:80"),
                  MakeMember("10.0.0.2:80", 100, false)};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t, Table::Create(spec, nullptr, nullptr));
  EXPECT_FALSE(t->panic());
  EXPECT_FALSE(t->eligible(1));
}

TEST(TableTest, NoBackendMessagesNameTheGroupAndCounts) {
  TableSpec spec;
  spec.group = "web";
  ASSERT_OK_AND_ASSIGN(TableConstPtr empty,
                       Table::Create(spec, nullptr, nullptr));
  EXPECT_EQ(empty->NoBackendMessage(0), "group 'web' has no backends");
  spec.members = {MakeMember("10.0.0.1:80", 0), MakeMember("10.0.0.2:80", 0)};
  ASSERT_OK_AND_ASSIGN(TableConstPtr zero,
                       Table::Create(spec, nullptr, nullptr));
  EXPECT_THAT(zero->NoBackendMessage(0),
              HasSubstr("all 2 backends are drained or have weight 0"));
  spec.panic_threshold = 0;
  spec.members = {MakeMember("10.0.0.1:80", 100, false)};
  ASSERT_OK_AND_ASSIGN(TableConstPtr down,
                       Table::Create(spec, nullptr, nullptr));
  EXPECT_THAT(down->NoBackendMessage(0), HasSubstr("0 of 1 backends ready"));
}

TEST(TableTest, LoadSurvivesRebuildsThroughTheTracker) {
  LoadTracker tracker;
  TableSpec spec;
  spec.members = {MakeMember("10.0.0.1:80")};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t1,
                       Table::Create(spec, nullptr, &tracker));
  t1->member(0).load->Start();
  ASSERT_OK_AND_ASSIGN(TableConstPtr t2,
                       Table::Create(spec, t1.get(), &tracker));
  EXPECT_EQ(t2->member(0).load, t1->member(0).load);
  EXPECT_EQ(t2->member(0).load->in_flight(), 1);
}

// A rebuild from the previous table takes its loads over by address,
// members added or removed around them; a table built with another tracker
// takes its loads from that tracker, whatever the previous table holds.
TEST(TableTest, RebuildTakesOverLoadsOnlyFromTheSameTracker) {
  LoadTracker tracker;
  TableSpec spec;
  spec.members = {MakeMember("10.0.0.3:80"), MakeMember("10.0.0.1:80"),
                  MakeMember("10.0.0.5:80")};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t1,
                       Table::Create(spec, nullptr, &tracker));
  TableSpec next;
  next.members = {MakeMember("10.0.0.0:80"), MakeMember("10.0.0.5:80"),
                  MakeMember("10.0.0.4:80"), MakeMember("10.0.0.1:80")};
  ASSERT_OK_AND_ASSIGN(TableConstPtr t2,
                       Table::Create(next, t1.get(), &tracker));
  ASSERT_EQ(t2->size(), 4u);
  EXPECT_EQ(t2->member(1).load, t1->member(0).load);  // 10.0.0.1
  EXPECT_EQ(t2->member(3).load, t1->member(2).load);  // 10.0.0.5
  EXPECT_EQ(t2->member(0).load, tracker.GetOrCreate("10.0.0.0:80").get());
  EXPECT_EQ(t2->member(2).load, tracker.GetOrCreate("10.0.0.4:80").get());

  LoadTracker other;
  ASSERT_OK_AND_ASSIGN(TableConstPtr t3, Table::Create(next, t2.get(), &other));
  EXPECT_EQ(t3->member(1).load, other.GetOrCreate("10.0.0.1:80").get());
  EXPECT_NE(t3->member(1).load, t2->member(1).load);
}

}  // namespace
}  // namespace aside
