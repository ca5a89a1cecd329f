#include "server/api/xds/xds_resources.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "envoy/config/core/v3/extension.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/http/router/v3/router.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/extensions/load_balancing_policies/least_request/v3/least_request.pb.h"
#include "envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.pb.h"
#include "envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.pb.h"
#include "envoy/extensions/load_balancing_policies/wrr_locality/v3/wrr_locality.pb.h"
#include "lib/address.h"
#include "lib/hash.h"
#include "lib/policies/ring_hash.h"

namespace aside::server::xds {

namespace core = envoy::config::core::v3;
namespace cluster = envoy::config::cluster::v3;
namespace endpoint = envoy::config::endpoint::v3;
namespace hcm =
    envoy::extensions::filters::network::http_connection_manager::v3;
namespace route = envoy::config::route::v3;
namespace lbp = envoy::extensions::load_balancing_policies;

ResourcePtr MakeResource(std::string name,
                         const google::protobuf::Message& message) {
  auto r = std::make_shared<Resource>();
  r->name = std::move(name);
  r->any.PackFrom(message);
  char version[17];
  std::snprintf(version, sizeof(version), "%016llx",
                static_cast<unsigned long long>(Fnv1a64(r->any.value())));
  r->version = version;
  return r;
}

namespace {

// The number at the start of `text` (after spaces), or -1.
int LeadingNumber(absl::string_view text) {
  while (!text.empty() && text.front() == ' ') {
    text.remove_prefix(1);
  }
  size_t end = 0;
  while (end < text.size() && absl::ascii_isdigit(text[end])) {
    ++end;
  }
  int n = -1;
  return end > 0 && absl::SimpleAtoi(text.substr(0, end), &n) ? n : -1;
}

}  // namespace

namespace {

// A C-core based client (C++, Python, Ruby, PHP...) and its core's major
// version (-1 when it says none). The version is either the core's
// ("29.0.0") or names it ("C-core 29.0.0 Python 1.51.1", what Debian's
// Python grpcio 1.51 sends under the name "gRPC C-core linux Python").
bool CoreClient(const core::Node& node, int* major) {
  const std::string& name = node.user_agent_name();
  const std::string& version = node.user_agent_version();
  constexpr absl::string_view kCore = "C-core";
  if (!absl::StrContains(name, kCore) && !absl::StrContains(version, kCore)) {
    return false;
  }
  *major = LeadingNumber(version);
  if (const size_t at = absl::string_view(version).find(kCore);
      at != absl::string_view::npos) {
    *major =
        LeadingNumber(absl::string_view(version).substr(at + kCore.size()));
  }
  return true;
}

}  // namespace

bool RingHashSafe(const core::Node& node) {
  if (int major = -1; CoreClient(node, &major)) {
    return major >= kFirstCoreWithWorkingRingHash;
  }
  const std::string& name = node.user_agent_name();
  const std::string& version = node.user_agent_version();
  if (absl::StartsWith(name, "gRPC Node")) {
    // grpc-js-xds sends its package version, "1.14.1".
    const std::vector<absl::string_view> parts =
        absl::StrSplit(version, absl::MaxSplits('.', 2));
    int major = 0;
    int minor = 0;
    return parts.size() >= 2 && absl::SimpleAtoi(parts[0], &major) &&
           absl::SimpleAtoi(parts[1], &minor) &&
           (major > 1 || (major == 1 && minor >= kFirstNodeXdsWithRingHash));
  }
  // Pure-language implementations whose ring hash has long been in use.
  return absl::StartsWith(name, "gRPC Go") ||
         absl::StartsWith(name, "gRPC Java");
}

bool ReadsTypedPolicies(const core::Node& node) {
  // Only old C-core reads the list where it should not (gRPC 1.51 behind
  // its environment flag, which must never meet a ring); every other
  // client reads the list and takes the first entry it supports, or
  // ignores it.
  int major = -1;
  return !CoreClient(node, &major) || major >= kFirstCoreWithWorkingRingHash;
}

namespace {

// Appends the typed policy `config` named `name` to `list`.
void AddPolicy(cluster::LoadBalancingPolicy* list, const char* name,
               const google::protobuf::Message& config) {
  core::TypedExtensionConfig* typed =
      list->add_policies()->mutable_typed_extension_config();
  typed->set_name(name);
  typed->mutable_typed_config()->PackFrom(config);
}

void AddRoundRobin(cluster::LoadBalancingPolicy* list) {
  AddPolicy(list, "envoy.load_balancing_policies.round_robin",
            lbp::round_robin::v3::RoundRobin());
}

// ring_hash with gRPC's defaults: xxHash (the only function gRPC clients
// accept) and no ring sizes (grpc-js-xds 1.14 reads typed sizes as strings
// and rejects the cluster).
void AddRingHash(cluster::LoadBalancingPolicy* list) {
  lbp::ring_hash::v3::RingHash ring;
  ring.set_hash_function(lbp::ring_hash::v3::RingHash::XX_HASH);
  AddPolicy(list, "envoy.load_balancing_policies.ring_hash", ring);
}

// wrr_locality over round_robin, then round_robin alone.
void AddWeightedFallback(cluster::LoadBalancingPolicy* list) {
  lbp::wrr_locality::v3::WrrLocality localities;
  AddRoundRobin(localities.mutable_endpoint_picking_policy());
  AddPolicy(list, "envoy.load_balancing_policies.wrr_locality", localities);
  AddRoundRobin(list);
}

}  // namespace

cluster::LoadBalancingPolicy TypedPolicies(const PolicyConfig& policy) {
  cluster::LoadBalancingPolicy list;
  switch (policy.kind) {
    case PolicyKind::kRoundRobin:
      AddRoundRobin(&list);
      break;
    case PolicyKind::kP2c:
    case PolicyKind::kLeastTime:
    case PolicyKind::kPrequal: {
      // Over every endpoint, not inside wrr_locality: each backend is a
      // locality of its own, where a choice between two is no choice.
      lbp::least_request::v3::LeastRequest least;
      least.mutable_choice_count()->set_value(2);
      AddPolicy(&list, "envoy.load_balancing_policies.least_request", least);
      AddWeightedFallback(&list);
      break;
    }
    case PolicyKind::kRingHash:
    case PolicyKind::kHash:
    case PolicyKind::kKetama:
    case PolicyKind::kMaglev:
      AddRingHash(&list);
      AddWeightedFallback(&list);
      break;
    default:
      AddWeightedFallback(&list);
      break;
  }
  return list;
}

namespace {

// A listener whose connection manager has the inline route configuration
// of one virtual host for every domain, with `routes` filled in by the
// caller, and the router filter last.
envoy::config::listener::v3::Listener ListenerWithHost(
    const std::string& name,
    const std::function<void(route::VirtualHost*)>& routes_of) {
  hcm::HttpConnectionManager manager;
  manager.set_stat_prefix("aside");
  route::RouteConfiguration* routes = manager.mutable_route_config();
  routes->set_name(name);
  route::VirtualHost* host = routes->add_virtual_hosts();
  host->set_name(name);
  host->add_domains("*");
  routes_of(host);
  hcm::HttpFilter* router = manager.add_http_filters();
  router->set_name("envoy.filters.http.router");
  router->mutable_typed_config()->PackFrom(
      envoy::extensions::filters::http::router::v3::Router());

  envoy::config::listener::v3::Listener listener;
  listener.set_name(name);
  listener.mutable_api_listener()->mutable_api_listener()->PackFrom(manager);
  return listener;
}

}  // namespace

envoy::config::listener::v3::Listener BuildNoRouteListener(
    const std::string& name) {
  return ListenerWithHost(name, [](route::VirtualHost*) {});
}

bool NoRouteListenerSafe(const core::Node& node) {
  // grpc-js-xds ("gRPC Node Pure JS") validates routes one by one and
  // accepts a virtual host without any.
  return absl::StartsWith(node.user_agent_name(), "gRPC Node");
}

envoy::config::listener::v3::Listener BuildListener(const std::string& name,
                                                    const std::string& cluster,
                                                    bool hash_header) {
  return ListenerWithHost(name, [&](route::VirtualHost* host) {
    route::Route* r = host->add_routes();
    r->mutable_match()->set_prefix("");
    route::RouteAction* action = r->mutable_route();
    action->set_cluster(cluster);
    if (hash_header) {
      action->add_hash_policy()->mutable_header()->set_header_name(
          kHashKeyHeader);
    }
  });
}

cluster::Cluster BuildCluster(const std::string& group,
                              const PolicyConfig& policy, bool ring_hash,
                              const OutlierSpec& outliers, bool typed) {
  cluster::Cluster c;
  c.set_name(group);
  c.set_type(cluster::Cluster::EDS);
  cluster::Cluster::EdsClusterConfig* eds = c.mutable_eds_cluster_config();
  eds->mutable_eds_config()->mutable_ads();
  eds->mutable_eds_config()->set_resource_api_version(core::V3);
  eds->set_service_name(group);
  c.mutable_connect_timeout()->set_seconds(5);
  if (ring_hash && IsHashPolicy(policy.kind)) {
    c.set_lb_policy(cluster::Cluster::RING_HASH);
    // XX_HASH, the default hash function.
    cluster::Cluster::RingHashLbConfig* ring = c.mutable_ring_hash_lb_config();
    const bool own = policy.kind == PolicyKind::kRingHash;
    ring->mutable_minimum_ring_size()->set_value(
        own ? policy.ring_hash.min_ring_size : 1024);
    ring->mutable_maximum_ring_size()->set_value(
        own ? policy.ring_hash.max_ring_size : kMaxRingHashSize);
  } else {
    c.set_lb_policy(cluster::Cluster::ROUND_ROBIN);
  }
  // A ring stays in the enum form (see TypedPolicies).
  if (typed && !(ring_hash && IsHashPolicy(policy.kind))) {
    *c.mutable_load_balancing_policy() = TypedPolicies(policy);
  }
  c.mutable_lrs_server()->mutable_self();
  if (outliers.enabled) {
    cluster::OutlierDetection* od = c.mutable_outlier_detection();
    od->mutable_interval()->set_seconds(1);
    auto duration = [](absl::Duration d, google::protobuf::Duration* out) {
      const int64_t nanos = absl::ToInt64Nanoseconds(d);
      out->set_seconds(nanos / 1'000'000'000);
      out->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
    };
    duration(outliers.base_ejection_time, od->mutable_base_ejection_time());
    duration(outliers.max_ejection_time, od->mutable_max_ejection_time());
    od->mutable_max_ejection_percent()->set_value(static_cast<uint32_t>(
        std::clamp(std::floor(outliers.max_ejection_percent), 0.0, 100.0)));
    od->mutable_enforcing_success_rate()->set_value(0);
    od->mutable_failure_percentage_threshold()->set_value(99);
    od->mutable_enforcing_failure_percentage()->set_value(100);
    od->mutable_failure_percentage_minimum_hosts()->set_value(1);
    od->mutable_failure_percentage_request_volume()->set_value(
        outliers.consecutive_failures);
  }
  return c;
}

std::string EncodedSubZone(const Backend& backend) {
  return RingHashSubZone(backend);
}

std::string BackendFromLocality(const core::Locality& locality) {
  const std::string& sub_zone = locality.sub_zone();
  const size_t slash = sub_zone.rfind('/');
  return slash == std::string::npos ? sub_zone : sub_zone.substr(slash + 1);
}

endpoint::ClusterLoadAssignment BuildLoadAssignment(
    const Table& table, double drop_in_panic_percent,
    double overload_fraction) {
  endpoint::ClusterLoadAssignment out;
  out.set_cluster_name(table.group());
  // Aside's round robin ignores weights: so do its xDS clients.
  const bool weighted = table.policy().kind != PolicyKind::kRoundRobin;
  struct Entry {
    uint32_t index;
    std::string sub_zone;
    Address address;
  };
  std::vector<Entry> entries;
  entries.reserve(table.size());
  for (uint32_t i = 0; i < table.size(); ++i) {
    const Member& m = table.member(i);
    if (!table.eligible(i) || m.weight == 0) {
      continue;
    }
    absl::StatusOr<Address> a = ParseAddress(m.backend.address);
    if (!a.ok() || !a->is_ip()) {
      continue;  // a host name no DNS source resolved: nothing to dial
    }
    entries.push_back({i, EncodedSubZone(m.backend), *std::move(a)});
  }
  // C-core orders localities by name whatever the order sent; grpc-js
  // keeps the order sent: sent in C-core's order, both see one order.
  std::sort(entries.begin(), entries.end(),
            [&](const Entry& x, const Entry& y) {
              const Locality& a = table.member(x.index).backend.locality;
              const Locality& b = table.member(y.index).backend.locality;
              return std::tie(a.region, a.zone, x.sub_zone) <
                     std::tie(b.region, b.zone, y.sub_zone);
            });
  for (const Entry& e : entries) {
    const Member& m = table.member(e.index);
    endpoint::LocalityLbEndpoints* locality = out.add_endpoints();
    locality->mutable_locality()->set_region(m.backend.locality.region);
    locality->mutable_locality()->set_zone(m.backend.locality.zone);
    locality->mutable_locality()->set_sub_zone(e.sub_zone);
    locality->mutable_load_balancing_weight()->set_value(weighted ? m.weight
                                                                  : 1);
    endpoint::LbEndpoint* lb = locality->add_lb_endpoints();
    core::SocketAddress* socket =
        lb->mutable_endpoint()->mutable_address()->mutable_socket_address();
    socket->set_address(e.address.host);
    socket->set_port_value(e.address.port);
    lb->set_health_status(core::HEALTHY);
    lb->mutable_load_balancing_weight()->set_value(1);
  }
  auto add_drop = [&](const char* category, double fraction) {
    auto* drop = out.mutable_policy()->add_drop_overloads();
    drop->set_category(category);
    drop->mutable_drop_percentage()->set_denominator(
        envoy::type::v3::FractionalPercent::MILLION);
    drop->mutable_drop_percentage()->set_numerator(static_cast<uint32_t>(
        std::lround(std::clamp(fraction, 0.0, 0.9) * 1'000'000)));
  };
  if (out.endpoints_size() == 0) {
    return out;
  }
  if (table.panic() && drop_in_panic_percent > 0) {
    add_drop("panic", drop_in_panic_percent / 100);
  } else if (overload_fraction > 0) {
    add_drop("overload", overload_fraction);
  }
  return out;
}

}  // namespace aside::server::xds
