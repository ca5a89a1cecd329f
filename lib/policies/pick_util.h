// Helpers the policies share on the pick path. Header-only, allocation-free.
#ifndef ASIDE_LIB_POLICIES_PICK_UTIL_H_
#define ASIDE_LIB_POLICIES_PICK_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "lib/clock.h"
#include "lib/random.h"
#include "lib/selector.h"
#include "lib/table.h"

namespace aside::pick_internal {

// The request's random source, or the calling thread's.
inline FastRng& RngOf(const PickRequest& request) noexcept {
  return request.rng != nullptr ? *request.rng : ThreadRng();
}

// The request's monotonic time, or the clock's.
inline int64_t NowOf(const PickRequest& request) noexcept {
  return request.now_nanos != 0 ? request.now_nanos : MonotonicNanos();
}

// Completes `out` (already holding `count` picks) with the acceptable
// members of `members`, walking from position `start` and wrapping, each
// member visited once. This is the last stage of every policy's fallback
// order: it guarantees that asking for as many picks as there are eligible
// members returns all of them. O(members.size() × count).
inline size_t FillByWalk(const Table& table, const PickRequest& request,
                         absl::Span<const uint32_t> members, size_t start,
                         absl::Span<uint32_t> out, size_t count) noexcept {
  const size_t n = members.size();
  if (n == 0) {
    return count;
  }
  if (start >= n) {
    start %= n;
  }
  for (size_t step = 0; step < n && count < out.size(); ++step) {
    size_t pos = start + step;
    if (pos >= n) {
      pos -= n;
    }
    const uint32_t index = members[pos];
    if (Acceptable(table, request, out, count, index)) {
      out[count++] = index;
    }
  }
  return count;
}

// Build-time helpers (control path).

// The members of `members` with weight > 0, in order: what hash rings and
// tables are built over. Readiness and drain are left to pick time, so a
// readiness change does not move any key.
inline std::vector<uint32_t> WeightedMembers(
    const Table& table, absl::Span<const uint32_t> members) {
  std::vector<uint32_t> out;
  out.reserve(members.size());
  for (uint32_t index : members) {
    if (table.member(index).weight > 0) {
      out.push_back(index);
    }
  }
  return out;
}

// True when the two lists name the same addresses with the same weights in
// the same order (a ring built for one serves the other).
inline bool SameMembersAndWeights(const Table& a,
                                  absl::Span<const uint32_t> a_members,
                                  const Table& b,
                                  absl::Span<const uint32_t> b_members) {
  if (a_members.size() != b_members.size()) {
    return false;
  }
  for (size_t i = 0; i < a_members.size(); ++i) {
    const Member& x = a.member(a_members[i]);
    const Member& y = b.member(b_members[i]);
    if (x.weight != y.weight || x.backend.address != y.backend.address) {
      return false;
    }
  }
  return true;
}

}  // namespace aside::pick_internal

#endif  // ASIDE_LIB_POLICIES_PICK_UTIL_H_
