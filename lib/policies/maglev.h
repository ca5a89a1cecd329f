// maglev: weighted Maglev hashing (Eisenbud et al., "Maglev: A Fast and
// Reliable Software Network Load Balancer", NSDI 2016, §3.4), with Envoy's
// weighting: a member with weight w takes a turn in w of every w_max rounds
// of the population loop, so its share of slots is proportional to w.
//
// Each member with weight > 0 gets a permutation of the table's slots from
// two seeded 64-bit hashes of its address (offset in [0, M), skip in
// [1, M)); members take turns claiming their next free slot until all M
// slots (M prime, default 65537) are owned. No std::hash, no pointers: the
// table is the same in every process for the same addresses and weights.
// With equal weights every member owns floor(M/n) or ceil(M/n) slots (within
// 1% of each other once M >= 100 n). Weight 0 members own no slot.
//
// A key goes to slot ReduceTo(Hash64(key), M). Fallbacks are deterministic:
// the members owning the following slots (a Maglev table interleaves
// members, so neighbours differ), then, after a bounded scan, a walk over the
// members in address order. Like ketama, the table ignores readiness and is
// shared with the previous table's selector when addresses and weights are
// unchanged.
//
// Build O(M log M) expected on the control path; pick O(1) (one hash, one
// table read) from any thread, lock-free, no allocation. Memory: 2 bytes per
// slot up to 65535 members, else 4.
#ifndef ASIDE_LIB_POLICIES_MAGLEV_H_
#define ASIDE_LIB_POLICIES_MAGLEV_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/selector.h"

namespace aside {

inline constexpr uint64_t kMaglevOffsetSeed = 0x6d61676c65762d6fULL;
inline constexpr uint64_t kMaglevSkipSeed = 0x6d61676c65762d73ULL;
inline constexpr uint64_t kMaglevKeySeed = 0x6d61676c65762d6bULL;

struct MaglevNode {
  absl::string_view address;
  uint32_t weight = 0;
};

// The population of a Maglev table of `table_size` slots (a prime): slot ->
// node position. Exposed for tests and benchmarks.
std::vector<uint32_t> MaglevPopulate(absl::Span<const MaglevNode> nodes,
                                     uint64_t table_size);

absl::StatusOr<std::unique_ptr<const Selector>> BuildMaglevSelector(
    const SelectorInput& input, uint64_t table_size);

// The shared table of a maglev selector (tests check it is shared); null
// for other selectors.
const void* MaglevTableIdentityForTest(const Selector& selector);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_MAGLEV_H_
