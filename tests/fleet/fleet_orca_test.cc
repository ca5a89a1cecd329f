// ORCA once per fleet: three real aside-server replicas on a real etcd
// cluster, an Admin group with an orca: block over backends that serve
// ORCA (in this process, counting the streams opened to them). Each backend
// has exactly one stream for the whole fleet, every replica serves the same
// weights from it, and when the replica holding a stream is killed with
// SIGKILL another opens it within the member TTL and a few intervals.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/fleet/fleet_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_orca.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Eventually;
using ::aside::testing::OrcaBackend;
using ::aside::testing::OrcaReport;

constexpr int kBackends = 6;
constexpr absl::Duration kWait = absl::Seconds(30);

class FleetOrcaTest : public aside::testing::FleetTestBase {
 protected:
  void SetUp() override {
    StartCluster();
    if (IsSkipped()) {
      return;
    }
    for (int i = 0; i < 3; ++i) {
      AddReplica(cluster_->endpoints());
    }
    // Ownership is decided on each replica's view of the membership: a
    // replica that has not yet seen the others would open every stream.
    ASSERT_TRUE(Eventually(
        [&] {
          for (const auto& r : replicas_) {
            if (r->Metric("aside_fleet_members") != 3) {
              return false;
            }
          }
          return true;
        },
        kWait));
    for (int i = 0; i < kBackends; ++i) {
      backends_.push_back(std::make_unique<OrcaBackend>());
      // Utilisation 0.1, 0.2, ... at qps 100: weights 1000, 500, 333, ...
      backends_.back()->orca().Set(OrcaReport(100, 0.1 * (i + 1)));
    }
    v1::Group g = aside::testing::MakeGroup("web", {});
    g.mutable_policy()->mutable_weighted_round_robin();
    v1::OrcaOptions* orca = g.mutable_orca();
    orca->set_enabled(true);
    orca->set_weights(true);
    orca->mutable_interval()->set_nanos(200'000'000);
    orca->mutable_blackout_period()->set_seconds(0);
    for (const auto& b : backends_) {
      g.add_backends()->set_address(b->address());
    }
    const grpc::Status s = replicas_[0]->Create(g);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // The effective weights replica `r` serves, by backend.
  std::vector<uint32_t> Weights(int r) {
    std::optional<v1::Group> g = replicas_[r]->Get("web");
    std::vector<uint32_t> out(kBackends, 0);
    if (!g.has_value()) {
      return out;
    }
    for (const v1::TableBackend& t : g->state()) {
      for (int i = 0; i < kBackends; ++i) {
        if (t.backend().address() == backends_[i]->address()) {
          out[i] = t.effective_weight();
        }
      }
    }
    return out;
  }

  int StreamsOpen() {
    int open = 0;
    for (const auto& b : backends_) {
      open += b->orca().open();
    }
    return open;
  }

  std::vector<std::unique_ptr<OrcaBackend>> backends_;
};

TEST_F(FleetOrcaTest, OneStreamPerBackendServesEveryReplica) {
  // 100 / (0.1 (i + 1)), the largest scaled to 1000.
  const std::vector<uint32_t> want = {1000, 500, 333, 250, 200, 167};
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Eventually([&] { return Weights(r) == want; }, kWait))
        << "replica " << r << ": " << ::testing::PrintToString(Weights(r));
  }
  // One stream per backend, for the whole fleet, and it stays one.
  EXPECT_EQ(StreamsOpen(), kBackends);
  for (const auto& b : backends_) {
    EXPECT_EQ(b->orca().streams(), 1) << b->address();
  }
  std::map<int, int> held;
  for (int r = 0; r < 3; ++r) {
    const std::string metrics = replicas_[r]->Metrics();
    const size_t at = metrics.find("\naside_orca_streams ");
    ASSERT_NE(at, std::string::npos);
    held[r] = std::stoi(metrics.substr(at + 20));
  }
  EXPECT_EQ(held[0] + held[1] + held[2], kBackends)
      << held[0] << " " << held[1] << " " << held[2];
  RecordProperty("streams_per_replica",
                 absl::StrCat(held[0], " ", held[1], " ", held[2]));

  // A load step on one backend reaches every replica.
  backends_[5]->orca().Set(OrcaReport(100, 0.05));  // 2000: the largest
  const std::vector<uint32_t> step = {500, 250, 167, 125, 100, 1000};
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Eventually([&] { return Weights(r) == step; }, kWait))
        << "replica " << r << ": " << ::testing::PrintToString(Weights(r));
  }
}

TEST_F(FleetOrcaTest, AKilledHoldersStreamsAreOpenedByAnotherReplica) {
  const std::vector<uint32_t> want = {1000, 500, 333, 250, 200, 167};
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Eventually([&] { return Weights(r) == want; }, kWait));
  }
  // Kill a replica that holds at least one stream.
  int victim = -1;
  for (int r = 0; r < 3 && victim < 0; ++r) {
    const std::string metrics = replicas_[r]->Metrics();
    const size_t at = metrics.find("\naside_orca_streams ");
    if (at != std::string::npos && std::stoi(metrics.substr(at + 20)) > 0) {
      victim = r;
    }
  }
  ASSERT_GE(victim, 0);
  int opened_before = 0;
  for (const auto& b : backends_) {
    opened_before += b->orca().streams();
  }
  const absl::Time killed = absl::Now();
  replicas_[victim]->server.process->Signal(SIGKILL);
  // Its streams end with it, and the survivors open them again: one per
  // backend. Meanwhile the survivors keep serving the weights.
  std::vector<uint32_t> lost;
  ASSERT_TRUE(Eventually(
      [&] {
        for (int r = 0; r < 3; ++r) {
          if (r != victim && Weights(r) != want) {
            lost = Weights(r);
          }
        }
        int opened = 0;
        for (const auto& b : backends_) {
          opened += b->orca().streams();
        }
        return opened > opened_before && StreamsOpen() == kBackends;
      },
      kWait))
      << StreamsOpen() << " streams open";
  const absl::Duration took = absl::Now() - killed;
  RecordProperty("takeover_ms", absl::StrCat(absl::ToInt64Milliseconds(took)));
  // member_ttl 2 s, the ownership check every second, three intervals.
  EXPECT_LT(took, absl::Seconds(2 + 1 + 1) + absl::Seconds(3));
  EXPECT_TRUE(lost.empty())
      << "a survivor served " << ::testing::PrintToString(lost);
  for (int r = 0; r < 3; ++r) {
    if (r != victim) {
      EXPECT_EQ(Weights(r), want) << "replica " << r;
    }
  }
}

}  // namespace
}  // namespace aside
