#include "bench/scenario/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::bench {
namespace {

using ::aside::testing::StatusIs;
using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::string_view kExample = R"(
seed 7
duration 20s          # per load step
warmup 2s
deadline 2s
clients 8
backend count=2 slots=2 service=10ms capacity=0.5
backend count=1 slots=4 service=5ms
sinkhole count=1
loads 0.5 0.9
event at=5s backend=0 capacity=0.3 for=10s
event at=8s backend=1 stall=200ms
event at=0s backend=2 warmup=5s
policies round_robin prequal
)";

TEST(ScenarioTest, ParsesEveryDirective) {
  ASSERT_OK_AND_ASSIGN(Scenario s, ParseScenario(kExample, "x.scn"));
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.duration, absl::Seconds(20));
  EXPECT_EQ(s.warmup, absl::Seconds(2));
  EXPECT_EQ(s.deadline, absl::Seconds(2));
  EXPECT_EQ(s.clients, 8u);
  ASSERT_EQ(s.backends.size(), 4u);
  EXPECT_EQ(s.backends[0].slots, 2u);
  EXPECT_EQ(s.backends[0].call_time(), absl::Milliseconds(20));
  EXPECT_EQ(s.backends[2].slots, 4u);
  EXPECT_EQ(s.backends[2].capacity, 1);
  EXPECT_FALSE(s.backends[2].sinkhole);
  EXPECT_TRUE(s.backends[3].sinkhole);
  EXPECT_THAT(s.loads, ElementsAre(0.5, 0.9));
  EXPECT_THAT(s.policies, ElementsAre("round_robin", "prequal"));
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[0].kind, ScenarioEvent::Kind::kCapacity);
  EXPECT_EQ(s.events[0].end(), absl::Seconds(15));
  EXPECT_EQ(s.events[1].kind, ScenarioEvent::Kind::kStall);
  EXPECT_EQ(s.events[2].kind, ScenarioEvent::Kind::kWarmup);
  EXPECT_EQ(s.events[2].line, 13);
}

TEST(ScenarioTest, AggregateCapacityExcludesSinkholes) {
  ASSERT_OK_AND_ASSIGN(Scenario s, ParseScenario(kExample, "x.scn"));
  // 2 × (2 × 0.5 / 10 ms) + 4 / 5 ms = 200 + 800 calls/s.
  EXPECT_THAT(s.AggregateCapacity(), DoubleNear(1000, 1e-9));
  // 20% of the calls take 20 ms, 80% take 5 ms.
  EXPECT_THAT(absl::ToDoubleMilliseconds(s.MeanCallTime()),
              DoubleNear(8, 1e-9));
}

TEST(ScenarioTest, CapacityFactorFollowsTheEvents) {
  ASSERT_OK_AND_ASSIGN(Scenario s, ParseScenario(kExample, "x.scn"));
  EXPECT_EQ(s.CapacityFactor(0, absl::Seconds(4)), 1);
  EXPECT_EQ(s.CapacityFactor(0, absl::Seconds(5)), 0.3);
  EXPECT_EQ(s.CapacityFactor(0, absl::Seconds(15)), 1);
  EXPECT_EQ(s.CapacityFactor(1, absl::Milliseconds(8100)), 0);
  EXPECT_EQ(s.CapacityFactor(1, absl::Milliseconds(8200)), 1);
  EXPECT_THAT(s.CapacityFactor(2, absl::Milliseconds(2500)),
              DoubleNear(0.55, 1e-12));
  EXPECT_EQ(s.CapacityFactor(2, absl::Seconds(5)), 1);
}

TEST(ScenarioTest, ErrorsNameFileAndLine) {
  EXPECT_THAT(ParseScenario("seed 1\nbogus 3\n", "a.scn"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.scn:2: unknown directive 'bogus'")));
  EXPECT_THAT(ParseScenario("backend slots=0\n", "a.scn"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.scn:1: slots: '0'")));
  EXPECT_THAT(ParseScenario("backend spin=1\n", "a.scn"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.scn:1: unknown key 'spin'")));
  EXPECT_THAT(ParseScenario("event at=1s backend=0 stall=1s warmup=1s\n", "a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a:1: event needs exactly one of")));
  EXPECT_THAT(ParseScenario("duration 5\n", "a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a:1: duration: ")));
  EXPECT_THAT(ParseScenario("backend\nevent at=0s backend=4 stall=1s\nloads 1\n"
                            "policies random\n",
                            "a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a:2: an event names backend 4 of 1")));
  EXPECT_THAT(
      ParseScenario("sinkhole\nloads 1\npolicies random\n", "a"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no backend")));
}

TEST(ScenarioTest, TheDefaultFileParses) {
  ASSERT_OK_AND_ASSIGN(Scenario s, LoadScenario(testing::SourceDir() +
                                                "/bench/scenario/default.scn"));
  EXPECT_EQ(s.backends.size(), 25u);
  EXPECT_TRUE(s.backends[24].sinkhole);
  EXPECT_EQ(s.clients, 8u);
  EXPECT_THAT(s.AggregateCapacity(), DoubleNear(5600, 1e-6));
}

}  // namespace
}  // namespace aside::bench
