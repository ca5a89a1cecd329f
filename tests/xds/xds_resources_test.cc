// The xDS encoding of a group: weights as locality weights (one locality
// per backend), eligibility as presence, the ring-hash gate by user agent,
// and the listener shape stock clients require.
#include "server/api/xds/xds_resources.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/extensions/load_balancing_policies/least_request/v3/least_request.pb.h"
#include "envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.pb.h"
#include "envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.pb.h"
#include "envoy/extensions/load_balancing_policies/wrr_locality/v3/wrr_locality.pb.h"
#include "tests/testing/tables.h"

namespace aside::server::xds {
namespace {

namespace core = envoy::config::core::v3;
namespace cluster = envoy::config::cluster::v3;
namespace hcm =
    envoy::extensions::filters::network::http_connection_manager::v3;
using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;
using ::aside::testing::TestAddress;

TableConstPtr MakeTable(TableOptions options) {
  PolicyConfig policy;
  policy.kind = PolicyKind::kWeightedRoundRobin;
  absl::StatusOr<TableConstPtr> t =
      Table::Create(MakeTableSpec(policy, options), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

core::Node NodeWith(std::string name, std::string version) {
  core::Node node;
  node.set_user_agent_name(std::move(name));
  node.set_user_agent_version(std::move(version));
  return node;
}

TEST(XdsLoadAssignmentTest, EachBackendIsALocalityWeightedByItsWeight) {
  TableConstPtr table = MakeTable({.weights = {500, 100, 100}});
  const auto cla = BuildLoadAssignment(*table);
  EXPECT_EQ(cla.cluster_name(), "test");
  ASSERT_EQ(cla.endpoints_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const auto& l = cla.endpoints(i);
    EXPECT_EQ(l.load_balancing_weight().value(), i == 0 ? 500u : 100u);
    ASSERT_EQ(l.lb_endpoints_size(), 1);
    EXPECT_EQ(l.lb_endpoints(0).health_status(), core::HEALTHY);
    const auto& socket =
        l.lb_endpoints(0).endpoint().address().socket_address();
    EXPECT_EQ(absl::StrCat(socket.address(), ":", socket.port_value()),
              TestAddress(static_cast<size_t>(i)));
    // A load report's locality names the backend.
    EXPECT_EQ(BackendFromLocality(l.locality()),
              TestAddress(static_cast<size_t>(i)));
  }
}

TEST(XdsLoadAssignmentTest, RoundRobinIgnoresWeightsAsAsideDoes) {
  PolicyConfig rr;
  rr.kind = PolicyKind::kRoundRobin;
  absl::StatusOr<TableConstPtr> t = Table::Create(
      MakeTableSpec(rr, {.weights = {300, 100}}), nullptr, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto cla = BuildLoadAssignment(**t);
  ASSERT_EQ(cla.endpoints_size(), 2);
  for (const auto& l : cla.endpoints()) {
    EXPECT_EQ(l.load_balancing_weight().value(), 1u);
  }
}

TEST(XdsLoadAssignmentTest, OnlyEligibleBackendsAreListed) {
  // Backend 1 is not ready, backend 2 drained (weight 0).
  TableConstPtr table = MakeTable(
      {.weights = {100, 100, 0, 100}, .ready = {true, false, true, true}});
  const auto cla = BuildLoadAssignment(*table);
  std::vector<std::string> listed;
  for (const auto& l : cla.endpoints()) {
    listed.push_back(BackendFromLocality(l.locality()));
  }
  EXPECT_THAT(listed, ::testing::ElementsAre(TestAddress(0), TestAddress(3)));
}

TEST(XdsLoadAssignmentTest, PanicListsEveryNonDrainedBackend) {
  TableConstPtr table = MakeTable({.weights = {100, 100, 100},
                                   .ready = {true, false, false},
                                   .panic_threshold = 50});
  ASSERT_TRUE(table->panic());
  EXPECT_EQ(BuildLoadAssignment(*table).endpoints_size(), 3);
  EXPECT_FALSE(BuildLoadAssignment(*table).has_policy());
  // grpclb's drop_in_panic_percent: the same share dropped by xDS clients.
  const auto cla = BuildLoadAssignment(*table, 25);
  ASSERT_EQ(cla.policy().drop_overloads_size(), 1);
  EXPECT_EQ(cla.policy().drop_overloads(0).category(), "panic");
  EXPECT_EQ(cla.policy().drop_overloads(0).drop_percentage().numerator(),
            250'000u);
  EXPECT_EQ(cla.policy().drop_overloads(0).drop_percentage().denominator(),
            envoy::type::v3::FractionalPercent::MILLION);
  // Overload drops are for groups out of panic.
  EXPECT_EQ(
      BuildLoadAssignment(*table, 0, 0.5).policy().drop_overloads(0).category(),
      "overload");
  TableConstPtr ok = MakeTable({.weights = {100}});
  const auto overloaded = BuildLoadAssignment(*ok, 25, 0.95);
  ASSERT_EQ(overloaded.policy().drop_overloads_size(), 1);
  EXPECT_EQ(overloaded.policy().drop_overloads(0).category(), "overload");
  EXPECT_EQ(overloaded.policy().drop_overloads(0).drop_percentage().numerator(),
            900'000u);
  // Out of panic, nothing is dropped.
  TableConstPtr healthy =
      MakeTable({.weights = {100, 100}, .panic_threshold = 50});
  EXPECT_FALSE(BuildLoadAssignment(*healthy, 25).has_policy());
}

TEST(XdsLocalityTest, SubZoneKeepsTheBackendsOwnSubZone) {
  Backend b;
  b.address = "[::1]:8080";
  b.locality.subzone = "rack-7";
  EXPECT_EQ(EncodedSubZone(b), "rack-7/[::1]:8080");
  core::Locality l;
  l.set_sub_zone(EncodedSubZone(b));
  EXPECT_EQ(BackendFromLocality(l), "[::1]:8080");
}

TEST(XdsRingHashGateTest, OldCoreClientsNeverGetRingHash) {
  EXPECT_FALSE(RingHashSafe(NodeWith("gRPC C-core linux", "29.0.0")));
  // What Debian's Python grpcio 1.51 sends.
  EXPECT_FALSE(RingHashSafe(
      NodeWith("gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1")));
  EXPECT_TRUE(RingHashSafe(
      NodeWith("gRPC C-core linux Python", "C-core 31.0.0 Python 1.53.0")));
  EXPECT_FALSE(RingHashSafe(NodeWith("C-core", "30.1.0")));
  EXPECT_TRUE(RingHashSafe(NodeWith("gRPC C-core linux", "31.0.0")));
  EXPECT_FALSE(RingHashSafe(NodeWith("gRPC C-core linux", "garbage")));
  EXPECT_FALSE(RingHashSafe(NodeWith("", "")));
  EXPECT_TRUE(RingHashSafe(NodeWith("gRPC Go", "1.60.0")));
}

TEST(XdsRingHashGateTest, CurrentNodeClientsGetRingHash) {
  // What @grpc/grpc-js-xds sends: its package version.
  EXPECT_TRUE(RingHashSafe(NodeWith("gRPC Node Pure JS", "1.14.1")));
  EXPECT_TRUE(RingHashSafe(NodeWith("gRPC Node Pure JS", "2.0.0")));
  EXPECT_FALSE(RingHashSafe(NodeWith("gRPC Node Pure JS", "1.13.2")));
  EXPECT_FALSE(RingHashSafe(NodeWith("gRPC Node Pure JS", "")));
}

TEST(XdsLoadAssignmentTest,
     EndpointsWeighOneSoLocalityTimesEndpointIsTheWeight) {
  TableConstPtr table = MakeTable({.weights = {500, 100}});
  const auto cla = BuildLoadAssignment(*table);
  ASSERT_EQ(cla.endpoints_size(), 2);
  for (const auto& l : cla.endpoints()) {
    EXPECT_EQ(l.lb_endpoints(0).load_balancing_weight().value(), 1u);
  }
}

TEST(XdsLoadAssignmentTest, LocalitiesAreListedInTheOrderOfTheirNames) {
  PolicyConfig policy;
  policy.kind = PolicyKind::kRingHash;
  TableSpec spec = MakeTableSpec(policy, {.weights = {1, 1, 1}});
  spec.members[0].backend.locality.zone = "c";
  spec.members[1].backend.locality.zone = "a";
  spec.members[2].backend.locality.zone = "b";
  absl::StatusOr<TableConstPtr> table = Table::Create(spec, nullptr, nullptr);
  ASSERT_TRUE(table.ok()) << table.status();
  const auto cla = BuildLoadAssignment(**table);
  ASSERT_EQ(cla.endpoints_size(), 3);
  EXPECT_EQ(cla.endpoints(0).locality().zone(), "a");
  EXPECT_EQ(cla.endpoints(1).locality().zone(), "b");
  EXPECT_EQ(cla.endpoints(2).locality().zone(), "c");
}

TEST(XdsClusterTest, HashPoliciesFallBackToRoundRobinUnlessAllowed) {
  PolicyConfig ketama;
  ketama.kind = PolicyKind::kKetama;
  EXPECT_EQ(BuildCluster("web", ketama, false).lb_policy(),
            cluster::Cluster::ROUND_ROBIN);
  const cluster::Cluster ring = BuildCluster("web", ketama, true);
  EXPECT_EQ(ring.lb_policy(), cluster::Cluster::RING_HASH);
  EXPECT_EQ(ring.ring_hash_lb_config().minimum_ring_size().value(), 1024u);
  EXPECT_EQ(ring.ring_hash_lb_config().maximum_ring_size().value(), 4096u);
  // A ring_hash group sends its own sizes: the client builds Aside's ring.
  PolicyConfig own;
  own.kind = PolicyKind::kRingHash;
  own.ring_hash.min_ring_size = 100;
  own.ring_hash.max_ring_size = 2000;
  const cluster::Cluster sized = BuildCluster("web", own, true);
  EXPECT_EQ(sized.lb_policy(), cluster::Cluster::RING_HASH);
  EXPECT_EQ(sized.ring_hash_lb_config().minimum_ring_size().value(), 100u);
  EXPECT_EQ(sized.ring_hash_lb_config().maximum_ring_size().value(), 2000u);
  EXPECT_EQ(BuildCluster("web", own, false).lb_policy(),
            cluster::Cluster::ROUND_ROBIN);
  PolicyConfig wrr;
  wrr.kind = PolicyKind::kWeightedRoundRobin;
  const cluster::Cluster c = BuildCluster("web", wrr, true);
  EXPECT_EQ(c.lb_policy(), cluster::Cluster::ROUND_ROBIN);
  EXPECT_EQ(c.type(), cluster::Cluster::EDS);
  EXPECT_TRUE(c.eds_cluster_config().eds_config().has_ads());
  EXPECT_EQ(c.eds_cluster_config().service_name(), "web");
  EXPECT_TRUE(c.lrs_server().has_self());
}

constexpr char kRoundRobinUrl[] =
    "type.googleapis.com/"
    "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin";
constexpr char kLeastRequestUrl[] =
    "type.googleapis.com/"
    "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest";
constexpr char kWrrLocalityUrl[] =
    "type.googleapis.com/"
    "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality";

// The type URLs of a typed policy list, in order.
std::vector<std::string> TypeUrls(const cluster::LoadBalancingPolicy& list) {
  std::vector<std::string> out;
  for (const auto& p : list.policies()) {
    out.push_back(p.typed_extension_config().typed_config().type_url());
  }
  return out;
}

PolicyConfig Policy(PolicyKind kind) {
  PolicyConfig p;
  p.kind = kind;
  return p;
}

TEST(XdsTypedPoliciesTest, EveryClientButOldCoreGetsTypedPolicies) {
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("gRPC Node Pure JS", "1.14.1")));
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("gRPC Node Pure JS", "1.13.2")));
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("gRPC Go", "1.60.0")));
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("gRPC C-core linux", "31.0.0")));
  // The list is the negotiation: a client that says nothing, or what no
  // rule here knows, takes the first entry it supports.
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("", "")));
  EXPECT_TRUE(ReadsTypedPolicies(NodeWith("gRPC Rust", "0.1.0")));
  // gRPC 1.51 keeps the enum form only: it reads the list when told to by
  // its environment, and must never meet a ring there.
  EXPECT_FALSE(ReadsTypedPolicies(
      NodeWith("gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1")));
  EXPECT_FALSE(ReadsTypedPolicies(NodeWith("gRPC C-core linux", "29.0.0")));
  EXPECT_FALSE(ReadsTypedPolicies(NodeWith("gRPC C-core linux", "garbage")));
}

TEST(XdsTypedPoliciesTest, EveryListEndsWithRoundRobin) {
  for (int k = 0; k < kPolicyKindCount; ++k) {
    const cluster::LoadBalancingPolicy list =
        TypedPolicies(Policy(static_cast<PolicyKind>(k)));
    const std::vector<std::string> urls = TypeUrls(list);
    ASSERT_FALSE(urls.empty()) << k;
    EXPECT_EQ(urls.back(), kRoundRobinUrl) << k;
    for (const auto& p : list.policies()) {
      EXPECT_FALSE(p.typed_extension_config().name().empty());
    }
  }
}

TEST(XdsTypedPoliciesTest, RoundRobinGroupsRotateOverEveryEndpoint) {
  EXPECT_THAT(TypeUrls(TypedPolicies(Policy(PolicyKind::kRoundRobin))),
              ::testing::ElementsAre(kRoundRobinUrl));
}

TEST(XdsTypedPoliciesTest, WeightedGroupsWeighLocalitiesThenRoundRobin) {
  for (const PolicyKind kind :
       {PolicyKind::kWeightedRoundRobin, PolicyKind::kRandom,
        PolicyKind::kSticky, PolicyKind::kLocality}) {
    const cluster::LoadBalancingPolicy list = TypedPolicies(Policy(kind));
    ASSERT_THAT(TypeUrls(list),
                ::testing::ElementsAre(kWrrLocalityUrl, kRoundRobinUrl));
    envoy::extensions::load_balancing_policies::wrr_locality::v3::WrrLocality
        localities;
    ASSERT_TRUE(
        list.policies(0).typed_extension_config().typed_config().UnpackTo(
            &localities));
    EXPECT_THAT(TypeUrls(localities.endpoint_picking_policy()),
                ::testing::ElementsAre(kRoundRobinUrl));
  }
}

constexpr char kRingHashUrl[] =
    "type.googleapis.com/"
    "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";

TEST(XdsTypedPoliciesTest, HashGroupsOfferARingFirstThenTheWeights) {
  for (const PolicyKind kind : {PolicyKind::kRingHash, PolicyKind::kHash,
                                PolicyKind::kKetama, PolicyKind::kMaglev}) {
    const cluster::LoadBalancingPolicy list = TypedPolicies(Policy(kind));
    ASSERT_THAT(
        TypeUrls(list),
        ::testing::ElementsAre(kRingHashUrl, kWrrLocalityUrl, kRoundRobinUrl));
    envoy::extensions::load_balancing_policies::ring_hash::v3::RingHash ring;
    ASSERT_TRUE(
        list.policies(0).typed_extension_config().typed_config().UnpackTo(
            &ring));
    // gRPC clients accept xxHash only; grpc-js-xds 1.14 rejects typed sizes.
    EXPECT_EQ(ring.hash_function(), envoy::extensions::load_balancing_policies::
                                        ring_hash::v3::RingHash::XX_HASH);
    EXPECT_FALSE(ring.has_minimum_ring_size());
    EXPECT_FALSE(ring.has_maximum_ring_size());
  }
}

TEST(XdsTypedPoliciesTest, LoadAwareGroupsOfferLeastRequestFirst) {
  for (const PolicyKind kind : {PolicyKind::kP2c, PolicyKind::kLeastTime}) {
    const cluster::LoadBalancingPolicy list = TypedPolicies(Policy(kind));
    ASSERT_THAT(TypeUrls(list),
                ::testing::ElementsAre(kLeastRequestUrl, kWrrLocalityUrl,
                                       kRoundRobinUrl));
    envoy::extensions::load_balancing_policies::least_request::v3::LeastRequest
        least;
    ASSERT_TRUE(
        list.policies(0).typed_extension_config().typed_config().UnpackTo(
            &least));
    EXPECT_EQ(least.choice_count().value(), 2u);
  }
}

TEST(XdsClusterTest, TypedPoliciesAreSentBesideTheEnumButNotWithARing) {
  const PolicyConfig wrr = Policy(PolicyKind::kWeightedRoundRobin);
  EXPECT_FALSE(BuildCluster("web", wrr, true).has_load_balancing_policy());
  const cluster::Cluster c = BuildCluster("web", wrr, true, {}, true);
  // Clients that do not read the list keep the enum form.
  EXPECT_EQ(c.lb_policy(), cluster::Cluster::ROUND_ROBIN);
  EXPECT_THAT(TypeUrls(c.load_balancing_policy()),
              ::testing::ElementsAre(kWrrLocalityUrl, kRoundRobinUrl));
  // A ring goes in the enum form alone: grpc-js-xds 1.14 rejects a typed
  // ring_hash that names its sizes.
  const PolicyConfig ketama = Policy(PolicyKind::kKetama);
  const cluster::Cluster ring = BuildCluster("web", ketama, true, {}, true);
  EXPECT_EQ(ring.lb_policy(), cluster::Cluster::RING_HASH);
  EXPECT_FALSE(ring.has_load_balancing_policy());
  // A client not trusted with the enum ring is offered one in the list.
  const cluster::Cluster offered = BuildCluster("web", ketama, false, {}, true);
  EXPECT_EQ(offered.lb_policy(), cluster::Cluster::ROUND_ROBIN);
  EXPECT_THAT(
      TypeUrls(offered.load_balancing_policy()),
      ::testing::ElementsAre(kRingHashUrl, kWrrLocalityUrl, kRoundRobinUrl));
}

TEST(XdsClusterTest, OutlierDetectionBecomesFailurePercentageEjection) {
  PolicyConfig wrr;
  wrr.kind = PolicyKind::kWeightedRoundRobin;
  EXPECT_FALSE(BuildCluster("web", wrr, false).has_outlier_detection());
  OutlierSpec outliers;
  outliers.enabled = true;
  outliers.consecutive_failures = 7;
  outliers.base_ejection_time = absl::Milliseconds(2500);
  outliers.max_ejection_time = absl::Seconds(60);
  outliers.max_ejection_percent = 34.9;
  const cluster::Cluster c = BuildCluster("web", wrr, false, outliers);
  ASSERT_TRUE(c.has_outlier_detection());
  const cluster::OutlierDetection& od = c.outlier_detection();
  EXPECT_EQ(od.interval().seconds(), 1);
  EXPECT_EQ(od.base_ejection_time().seconds(), 2);
  EXPECT_EQ(od.base_ejection_time().nanos(), 500'000'000);
  EXPECT_EQ(od.max_ejection_time().seconds(), 60);
  EXPECT_EQ(od.max_ejection_percent().value(), 34u);
  // Success-rate ejection off; more than 99 % of at least
  // consecutive_failures calls failed (gRPC ejects above the threshold),
  // whatever the number of backends.
  ASSERT_TRUE(od.has_enforcing_success_rate());
  EXPECT_EQ(od.enforcing_success_rate().value(), 0u);
  EXPECT_EQ(od.failure_percentage_threshold().value(), 99u);
  EXPECT_EQ(od.enforcing_failure_percentage().value(), 100u);
  EXPECT_EQ(od.failure_percentage_minimum_hosts().value(), 1u);
  EXPECT_EQ(od.failure_percentage_request_volume().value(), 7u);
}

TEST(XdsListenerTest, RoutesEveryDomainToTheClusterWithTheRouterLast) {
  const auto listener = BuildListener("web.prod", "web", false);
  EXPECT_EQ(listener.name(), "web.prod");
  hcm::HttpConnectionManager manager;
  ASSERT_TRUE(listener.api_listener().api_listener().UnpackTo(&manager));
  ASSERT_GT(manager.http_filters_size(), 0);
  EXPECT_EQ(manager.http_filters(manager.http_filters_size() - 1)
                .typed_config()
                .type_url(),
            kRouterType);
  const auto& host = manager.route_config().virtual_hosts(0);
  EXPECT_THAT(host.domains(), ::testing::ElementsAre("*"));
  EXPECT_EQ(host.routes(0).route().cluster(), "web");
  EXPECT_EQ(host.routes(0).route().hash_policy_size(), 0);
  EXPECT_EQ(BuildListener("web", "web", true)
                .api_listener()
                .api_listener()
                .type_url(),
            kHttpConnectionManagerType);
}

TEST(XdsResourceTest, EqualEncodingsHaveEqualVersions) {
  TableConstPtr a = MakeTable({.weights = {300, 100}});
  TableConstPtr b = MakeTable({.weights = {300, 100}, .generation = 2});
  TableConstPtr c = MakeTable({.weights = {100, 100}});
  EXPECT_EQ(MakeResource("test", BuildLoadAssignment(*a))->version,
            MakeResource("test", BuildLoadAssignment(*b))->version);
  EXPECT_NE(MakeResource("test", BuildLoadAssignment(*a))->version,
            MakeResource("test", BuildLoadAssignment(*c))->version);
  EXPECT_EQ(MakeResource("test", BuildLoadAssignment(*a))->any.type_url(),
            kEndpointType);
}

}  // namespace
}  // namespace aside::server::xds
