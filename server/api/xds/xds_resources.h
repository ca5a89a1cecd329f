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
// endpoint of weight 1: clients that weigh endpoints (ring_hash, gRFC A42)
// take locality weight × endpoint weight, which is then the backend's
// weight too. Localities are listed in the order gRPC C-core keeps them
// (region, zone, sub_zone), so every client family sees one endpoint
// order, the order a ring is built in (lib/policies/ring_hash.h). A
// backend's share of picks is then its weight over the sum, as Aside's
// weighted policies give it; clients' locality picks are random, so the
// split holds over many requests rather than exactly per cycle. Backends
// that are not eligible (drained, weight 0, not ready outside panic) are
// left out; in panic every non-drained backend is listed. A round_robin
// group ignores weights in Aside, so all its localities weigh 1. Load reports
// name the locality, which names the backend (BackendFromLocality).
//
// Hash policies (ring_hash, hash, ketama, maglev) become RING_HASH in the
// enum form, with a header hash policy, for clients known to build rings
// correctly (RingHashSafe). ring_hash groups send their own ring sizes, so
// the client builds the ring Aside's Pick uses; the others get 1024..4096,
// gRPC's ring, consistent but not Aside's mapping.
//
// Every client not known to misread it (ReadsTypedPolicies: all but gRPC
// C-core before 1.53) also gets the Cluster's load_balancing_policy (gRFC
// A52), a list in order of preference of which the client takes the first
// it supports (TypedPolicies): the list is the capability negotiation, so
// an unknown client that knows ring_hash keeps key affinity and one that
// does not falls back to round robin. Only old C-core clients get the
// weighted encoding with ROUND_ROBIN alone for a hash group.
//
// Pure functions; thread-safe. Costs: O(members) per load assignment.
#ifndef ASIDE_SERVER_API_XDS_XDS_RESOURCES_H_
#define ASIDE_SERVER_API_XDS_XDS_RESOURCES_H_

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
#include "server/schema/group_spec.h"

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
// The first @grpc/grpc-js-xds minor version (1.x) sent RING_HASH: 1.14,
// the release the tests run (1.14.1), whose ring matches Aside's key for
// key; older releases are not known to, so they get the fallback. User
// agent "gRPC Node Pure JS", version the package's.
inline constexpr int kFirstNodeXdsWithRingHash = 14;

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

// Whether a client may be sent RING_HASH in the enum form with Aside's ring
// sizes: gRPC C-core based clients (C++, Python, Ruby, PHP...) report user
// agent "C-core" (or a gRPC language name) with a version; those older than
// kFirstCoreWithWorkingRingHash are not safe. gRPC Go and Java are;
// grpc-js-xds ("gRPC Node Pure JS") from 1.kFirstNodeXdsWithRingHash on.
// Any other client is offered a ring through the typed list instead
// (ReadsTypedPolicies), which it may decline.
bool RingHashSafe(const envoy::config::core::v3::Node& node);

// Whether a client may be sent the Cluster's load_balancing_policy (gRFC
// A52): every client but C-core based ones older than
// kFirstCoreWithWorkingRingHash. A client reads the list and takes the
// first entry it supports, or ignores the field; gRPC 1.51 (C-core 29)
// reads it only when GRPC_EXPERIMENTAL_XDS_CUSTOM_LB_CONFIG is set, must
// never meet a ring there, and keeps the enum form alone, byte for byte
// as before. An unknown or empty user agent gets the list.
bool ReadsTypedPolicies(const envoy::config::core::v3::Node& node);

// The typed policies (gRFC A52) of a group's Cluster, in order of
// preference, every list ending with round_robin so that any client that
// reads the field finds one it supports:
// - p2c and least_time: least_request (gRFC A48, two choices) over every
//   endpoint, then the weighted fallback;
// - round_robin: round_robin alone, over every endpoint (strict rotation,
//   where wrr_locality over localities weighing 1 is a random pick);
// - ring_hash, hash, ketama and maglev: ring_hash (xxHash, gRPC's default
//   ring sizes) over every endpoint, then the weighted fallback: a client
//   without ring hash loses key affinity, not the cluster;
// - every other policy: the weighted fallback.
// The weighted fallback is wrr_locality (a locality picked by weight, the
// weight encoding above) with round_robin inside, followed by a bare
// round_robin for a client without wrr_locality (weights lost rather than
// the cluster rejected).
//
// A Cluster that is sent RING_HASH in the enum form carries no list: the
// enum carries the group's ring sizes, which grpc-js-xds 1.14 would decode
// as strings in a typed ring_hash and then reject (the whole cluster, not
// just the entry), while every client trusted with a ring reads the enum
// form correctly, sizes included.
envoy::config::cluster::v3::LoadBalancingPolicy TypedPolicies(
    const PolicyConfig& policy);

// The Listener for target name `name` (what the client put after xds:///):
// an API listener whose connection manager routes everything, for any
// domain, to `cluster`; with `hash_header`, the route hashes on
// kHashKeyHeader (for RING_HASH clusters).
envoy::config::listener::v3::Listener BuildListener(const std::string& name,
                                                    const std::string& cluster,
                                                    bool hash_header);

// The Listener for a target name no group answers, for clients that accept
// it (NoRouteListenerSafe): the same shape with a virtual host of no
// routes, so the client fails calls at once with UNAVAILABLE ("Failed to
// route call") instead of waiting for the resource: grpc-js treats a
// resource left out of a response as missing only after a 15 s timer, and
// even then keeps calls queued until their deadline. Sent for names that
// were never a group on the stream; a group deleted under a client is
// left out instead, so that a client told to ignore deletions keeps its
// last configuration. Other clients get the name left out (the xDS rule):
// gRPC C-core rejects a virtual host without routes.
envoy::config::listener::v3::Listener BuildNoRouteListener(
    const std::string& name);
bool NoRouteListenerSafe(const envoy::config::core::v3::Node& node);

// The EDS cluster of group `group` with its endpoints over ADS and load
// reports to this server. `ring_hash`: RING_HASH when the policy hashes,
// else ROUND_ROBIN (the weighted encoding). `typed`: also the typed
// policies (TypedPolicies), which clients that read them use instead,
// unless the cluster is RING_HASH.
//
// With `outliers` enabled, the cluster carries gRPC's outlier detection
// (gRFC A50) so that clients eject a failing backend locally, at once,
// besides Aside's own ejection from their load reports. gRPC has no
// consecutive-failure ejection; its nearest is failure-percentage
// ejection, so a run of `consecutive_failures` becomes: more than 99 % of
// the calls failed (gRPC ejects above the threshold, so 100 never would)
// in an interval of 1 s with at least `consecutive_failures` calls, any
// number of backends (minimum_hosts 1).
// Ejection times and max_ejection_percent (rounded down) carry over;
// success-rate ejection is off.
envoy::config::cluster::v3::Cluster BuildCluster(
    const std::string& group, const PolicyConfig& policy, bool ring_hash,
    const OutlierSpec& outliers = {}, bool typed = false);

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

#endif  // ASIDE_SERVER_API_XDS_XDS_RESOURCES_H_
