// Rendezvous (highest-random-weight) hashing: Thaler and Ravishankar, "A
// Name-Based Mapping Scheme for Rendezvous", 1996. A key belongs to the
// member whose weight w(key, member) is highest. Removing a member moves
// only the keys it held (each to the member with the next-highest weight);
// adding one takes from every other member about 1/(n+1) of its keys and
// moves nothing else. No ring, no table: the cost is one mix per member per
// lookup, O(members), which for a fleet of a handful of replicas is a few
// nanoseconds.
//
// Used for probe ownership (DESIGN.md §11): every replica computes the same
// owner from the same member ids, so the hashes below are fixed functions of
// their input bytes (lib/hash.h), identical in every process and build.
//
// Thread-safe (pure functions).
#ifndef ASIDE_LIB_RENDEZVOUS_H_
#define ASIDE_LIB_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/strings/string_view.h"
#include "lib/hash.h"

namespace aside {

// The hash of a member id, computed once per membership change.
inline uint64_t RendezvousMemberHash(absl::string_view member_id) noexcept {
  return Hash64(member_id, 0x6a09e667f3bcc908ULL);
}

// The weight of `key_hash` on a member. Both inputs are already well mixed;
// the xor of two distinct members' hashes with one key differs, and the
// finaliser spreads that difference over every bit.
inline uint64_t RendezvousWeight(uint64_t key_hash,
                                 uint64_t member_hash) noexcept {
  return Mix64(key_hash ^ Mix64(member_hash));
}

// The index in `members` (member hashes) of the owner of `key_hash`;
// members.size() when empty. Ties (astronomically rare) go to the smaller
// member hash, so the answer does not depend on the order of `members`.
inline size_t RendezvousOwner(uint64_t key_hash,
                              std::span<const uint64_t> members) noexcept {
  size_t best = members.size();
  uint64_t best_weight = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const uint64_t w = RendezvousWeight(key_hash, members[i]);
    if (best == members.size() || w > best_weight ||
        (w == best_weight && members[i] < members[best])) {
      best = i;
      best_weight = w;
    }
  }
  return best;
}

}  // namespace aside

#endif  // ASIDE_LIB_RENDEZVOUS_H_
