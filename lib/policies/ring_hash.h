// ring_hash: the ring that gRPC's `ring_hash` load-balancing policy builds
// (gRFC A42; grpc-js, gRPC C-core, Go and Java, from Envoy's ring hash), entry
// for entry, so that Pick, the stub and an xDS client sending the key in the
// route's hash header reach the same backend for every key.
//
// The ring is built over the members gRPC is sent in the group's
// ClusterLoadAssignment: eligible (ready, or every non-drained member in
// panic) with weight > 0. They are taken in the order gRPC clients put
// endpoints in (by locality: region, zone, sub-zone as Aside encodes it in
// EDS, see RingHashSubZone; C-core sorts localities so, and Aside sends them
// so). With weights w_i, sum W and n_i = w_i / W (doubles), the scale is
// min(ceil(min n_i × min_ring_size) / min n_i, max_ring_size) and the ring
// has ceil(scale) entries: walking the members in order, a running target
// grows by scale × n_i and the member gets entries while the running count
// is below it. Entry k of a member hashes XXH64("<address>_<k>", seed 0),
// where <address> is "host:port", or "[host]:port" for IPv6, as the client
// formats the endpoint. Entries are sorted by hash. A key hashes to
// XXH64(key, 0) (what gRPC computes for a header hash policy) and goes to
// the first entry whose hash is >= it, wrapping.
//
// Arithmetic is plain IEEE double without fused multiply-add (the file is
// built with -ffp-contract=off), as JavaScript's and C-core's.
//
// Fallbacks walk the ring from that entry (as gRPC walks to the next
// READY entry), skipping members already chosen or excluded, then the
// members in ring order. Deterministic for the key.
//
// Unlike ketama and maglev the ring depends on readiness (gRPC is not sent
// the members that are not eligible, and the scale depends on who is in the
// ring): a health change moves the keys of the member that changed and
// re-spreads the rest the way gRPC's ring does. The ring is shared with the
// previous table's selector when the ring members, their weights and the
// sizes are unchanged.
//
// Build: O(R log R) for R = ring size (at most kMaxRingHashSize entries,
// 12 bytes each) on the control path; pick: one XXH64 of the key and a
// binary search, from any thread, lock-free, no allocation.
#ifndef ASIDE_LIB_POLICIES_RING_HASH_H_
#define ASIDE_LIB_POLICIES_RING_HASH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/backend.h"
#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

// gRPC clients cap the ring at 4096 entries unless the channel says
// otherwise (grpc.lb.ring_hash.ring_size_cap): larger configured sizes would
// give Aside a ring its clients do not build. The policy's size range
// (kRingHashSize) ends there.
inline constexpr uint64_t kMaxRingHashSize = kRingHashSize.max;

// The sub-zone Aside sends a backend's endpoint under in EDS: the
// backend's own sub-zone, then '/', then its address (the address alone
// when it has none), so every backend is a locality of its own.
std::string RingHashSubZone(const Backend& backend);

// "host:port" ("[host]:port" for IPv6) of an IP address as gRPC clients
// print an endpoint; other addresses (host names) unchanged.
std::string RingHashEndpointName(absl::string_view address);

struct RingHashNode {
  std::string name;  // RingHashEndpointName of the address
  uint32_t weight = 0;
};

// The ring's entries, sorted by hash; entry i belongs to node positions[i].
struct RingHashRing {
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> positions;
};

// Builds the ring of `nodes` (in ring order) as gRPC does. Weight-0 nodes
// get no entries. Exposed for the golden-vector tests.
RingHashRing BuildRingHashRing(absl::Span<const RingHashNode> nodes,
                               uint64_t min_ring_size, uint64_t max_ring_size);

absl::StatusOr<std::unique_ptr<const Selector>> BuildRingHashSelector(
    const SelectorInput& input, uint64_t min_ring_size, uint64_t max_ring_size);

// The ring a ring_hash selector uses (tests check it is shared); null for
// other selectors.
const RingHashRing* RingHashRingForTest(const Selector& selector);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_RING_HASH_H_
