// The selection interface every policy implements.
//
// Thread model: a Selector is built once, from one Table, on the control
// path (server: the group's rebuild; stub: the watcher thread) and is never
// mutated afterwards. Pick() is const and may be called from any number of
// threads at once; it never blocks, never takes a lock and never allocates.
// Mutable state a policy needs across picks (a round-robin position) is an
// atomic inside the selector; per-backend load lives in BackendLoad, outside
// the selector, so it survives rebuilds.
#ifndef ASIDE_LIB_SELECTOR_H_
#define ASIDE_LIB_SELECTOR_H_

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "lib/backend.h"
#include "lib/random.h"

namespace aside {

class Table;

// Holds a session token a sticky pick issues. Fixed size: issuing a token
// does not allocate.
struct SessionToken {
  static constexpr size_t kCapacity = 128;
  std::array<char, kCapacity> data{};
  size_t size = 0;
  absl::string_view view() const { return {data.data(), size}; }
};

// Input of one pick. Everything is borrowed for the duration of the call.
struct PickRequest {
  // Key for hash policies and the sticky fallback.
  absl::string_view key;
  // Table member indexes not to return (a retry), in any order.
  absl::Span<const uint32_t> exclude;
  // Where the caller runs (locality policy); null when unknown.
  const Locality* caller = nullptr;
  // A session token from an earlier pick (sticky policy).
  absl::string_view session_token;
  // Monotonic time (lib/clock.h) for load models; 0 means "read the clock".
  int64_t now_nanos = 0;
  // Wall time for session-token expiry; InfinitePast means "read the clock".
  absl::Time wall_now = absl::InfinitePast();
  // Random source; null means ThreadRng(). Tests pass a seeded one.
  FastRng* rng = nullptr;
  // Where a sticky pick writes a newly issued token (null: do not issue).
  SessionToken* issued_token = nullptr;
};

class Selector {
 public:
  virtual ~Selector() = default;

  // Writes up to out.size() distinct eligible member indexes of the table
  // into `out`, the first choice first, then fallbacks in the policy's order
  // of preference (deterministic for hash policies); returns how many were
  // written. Never returns an ineligible member (not ready, weight 0) or an
  // excluded one; 0 means nothing can be picked. One call advances shared
  // state (a round-robin position) at most once, however many are written.
  virtual size_t Pick(const PickRequest& request,
                      absl::Span<uint32_t> out) const noexcept = 0;
};

// What a selector is built from.
struct SelectorInput {
  // The table that owns the members; it owns the selector too, so it
  // outlives it. Selectors may keep this pointer.
  const Table* table = nullptr;
  // The table member indexes this selector chooses among, ascending (all of
  // them for a group's top-level selector; one zone's for a locality child).
  absl::Span<const uint32_t> members;
  // The selector in the same place in the previous table (same group), or
  // null. A builder may share immutable structures with it (a hash ring)
  // when what they were built from is unchanged.
  const Selector* previous = nullptr;
};

}  // namespace aside

#endif  // ASIDE_LIB_SELECTOR_H_
