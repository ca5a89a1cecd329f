// hash: Pingora's FNVHash selection. The key's FNV-1a 64 hash modulo the
// weighted slot table picks the first choice: member i fills weight_i slots
// (weights divided by their greatest common divisor; heavier members do not
// come first, members are in address order as in Pingora's BTreeSet). With
// keys key-0..key-99999 over 4 backends of weight 1 this gives exactly
// Pingora's 24999/25001/25001/24999, and 9925/19982/30105/39988 for weights
// 1,2,3,4.
//
// The table is built over the members with weight > 0, ready or not, and is
// shared with the previous table's selector when addresses and weights are
// unchanged: a readiness change moves only the keys of the member that went
// away. When the first choice is not eligible or excluded, fallbacks are
// deterministic for the key: 8 more weighted probes (rehashes of the key
// hash), then a walk over the members from a key-derived position; each
// eligible member appears at most once. Weight 0 is never picked, not even
// as a fallback (Pingora's fallbacks ignore weights).
//
// Build O(n + slots) on the control path; Pick from any thread, O(1) for the
// first choice (O(log n) when the reduced weights sum past kMaxHashSlots and
// a prefix-sum search replaces the slot table, with identical results).
#ifndef ASIDE_LIB_POLICIES_HASH_H_
#define ASIDE_LIB_POLICIES_HASH_H_

#include <cstdint>
#include <memory>

#include "lib/selector.h"

namespace aside {

inline constexpr uint64_t kMaxHashSlots = uint64_t{1} << 18;

std::unique_ptr<const Selector> MakeHashSelector(const SelectorInput& input);

// The shared slot structure of a hash selector (for tests that check it is
// reused); null for other selectors.
const void* HashTableIdentityForTest(const Selector& selector);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_HASH_H_
