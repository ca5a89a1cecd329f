// What Aside serves to xDS clients, built from a group's published table:
// the resources of one target name (Listener → inline route → Cluster →
// ClusterLoadAssignment) and how load reports map back to backends.
//
// The weight encoding. gRPC 1.51 clients balance an EDS cluster with
// ROUND_ROBIN by first picking a locality in proportion to its
// load_balancing_weight, then round-robin inside it; endpoint weights are
// ignored. So each eligible backend gets a locality of its own (region and
// zone its own; sub_zone "<sub_zone>/<address>", or just the address) whose
// load_balancing_weight is the backend's effective weight, with one HEALTHY
// endpoint that also carries the weight (for clients that read it). A
// backend's share of picks is then its weight over the sum, as Aside's
// weighted policies give it; clients' locality picks are random, so the
// split holds over many requests rather than exactly per cycle. Backends
// that are not eligible (drained, weight 0, not ready outside panic) are
// left out; in panic every non-drained backend is listed. A round_robin
// group ignores weights in Aside, so all its localities weigh 1. Load reports
// name the locality, which names the backend (BackendFromLocality).
//
// Hash policies (hash, ketama, maglev) become RING_HASH with a header hash
// policy only for clients known to survive it (RingHashSafe); every other
// client gets the weighted encoding above with ROUND_ROBIN.
//
// Pure functions; thread-safe. Costs: O(members) per load assignment.
#ifndef ASIDE_SERVER_XDS_XDS_RESOURCES_H_
#define ASIDE_SERVER_XDS_XDS_RESOURCES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/core/v3/base.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "google/protobuf/any.pb.h"
#include "lib/policy_config.h"
#include "lib/table.h"

namespace aside::server::xds {

inline constexpr char kListenerType[] =
    "type.googleapis.com/envoy.config.listener.v3.Listener";
inline constexpr char kRouteType[] =
    "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
inline constexpr char kClusterType[] =
    "type.googleapis.com/envoy.config.cluster.v3.Cluster";
inline constexpr char kEndpointType[] =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
inline constexpr char kHttpConnectionManagerType[] =
    "type.googleapis.com/envoy.extensions.filters.network."
    "http_connection_manager.v3.HttpConnectionManager";
inline constexpr char kRouterType[] =
    "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

// The request header whose value RING_HASH clients hash (set it to the key
// you would pass to Pick).
inline constexpr char kHashKeyHeader[] = "x-aside-hash-key";

// The first gRPC C-core major version whose ring_hash picker no longer
// crashes (grpc/grpc#31766, fixed by grpc/grpc#32012 in January 2023; 1.51
// is C-core 29 and dies on RING_HASH). Conservatively 31 (gRPC 1.53).
inline constexpr int kFirstCoreWithWorkingRingHash = 31;

// One resource encoded once and shared by every stream that sends it.
// `version` is a hash of the encoding: equal bytes, equal version.
struct Resource {
  std::string name;
  std::string version;
  google::protobuf::Any any;
};
using ResourcePtr = std::shared_ptr<const Resource>;

// Packs `message` under `name`, versioned by its encoding.
ResourcePtr MakeResource(std::string name,
                         const google::protobuf::Message& message);

// Whether a client may be sent RING_HASH: gRPC C-core based clients (C++,
// Python, Ruby, PHP...) report user agent "C-core" (or a gRPC language name)
// with a version; those older than kFirstCoreWithWorkingRingHash are not
// safe. Clients that do not say what they are are treated as unsafe.
bool RingHashSafe(const envoy::config::core::v3::Node& node);

// The Listener for target name `name` (what the client put after xds:///):
// an API listener whose connection manager routes everything, for any
// domain, to `cluster`; with `hash_header`, the route hashes on
// kHashKeyHeader (for RING_HASH clusters).
envoy::config::listener::v3::Listener BuildListener(const std::string& name,
                                                    const std::string& cluster,
                                                    bool hash_header);

// The EDS cluster of group `group` with its endpoints over ADS and load
// reports to this server. `ring_hash`: RING_HASH when the policy hashes,
// else ROUND_ROBIN (the weighted encoding).
envoy::config::cluster::v3::Cluster BuildCluster(const std::string& group,
                                                 const PolicyConfig& policy,
                                                 bool ring_hash);

// The endpoints of `table` in the weight encoding above. While the table is
// in panic and `drop_in_panic_percent` (the group's grpclb option, 0..90)
// is set, clients are told to drop that share of calls (category
// "panic"), as grpclb clients are; otherwise `overload_fraction` (0..0.9)
// of calls are dropped (category "overload").
envoy::config::endpoint::v3::ClusterLoadAssignment BuildLoadAssignment(
    const Table& table, double drop_in_panic_percent = 0,
    double overload_fraction = 0);

// The sub_zone BuildLoadAssignment gives a backend.
std::string EncodedSubZone(const Backend& backend);
// The backend address a reported locality names ("" when it is not one of
// ours).
std::string BackendFromLocality(
    const envoy::config::core::v3::Locality& locality);

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_XDS_XDS_RESOURCES_H_
