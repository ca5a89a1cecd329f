// sticky: session affinity through stateless tokens. A pick without a valid
// token is made by the fallback policy (PolicyConfig::child, default
// round_robin) and issues a token naming the chosen backend and an expiry,
// signed with the table's session key; no server-side session table, so
// tokens survive restarts and work on every replica sharing the key.
//
// Token: base64url (no padding) of 49 bytes = version (1) | expiry, Unix
// seconds (int64 LE) | backend id, Hash64 of its address (uint64 LE) |
// HMAC-SHA256(key, "aside-sticky-v1\n" group "\n" first 17 bytes). The group
// is signed in, so a token of one group means nothing in another. Verified
// with CRYPTO_memcmp (constant time).
//
// A presented token that verifies, has not expired, and names a backend that
// is still eligible (and not excluded by this pick) is honoured: that
// backend is the first choice. The token is then re-issued only when less
// than half of the ttl remains (a sliding expiry that costs an HMAC only
// once per half ttl); otherwise issued_token is left empty, meaning "keep the
// token you have". A forged, expired or malformed token, or one naming a
// backend that is gone, not ready, drained or excluded, is ignored: the
// fallback policy picks and a new token is issued for its choice.
// Fallbacks (more than one pick asked for) come from the fallback policy.
//
// Costs: build O(n log n) plus the fallback's build; a pick verifies at most
// one HMAC and issues at most one (each two SHA-256 compressions from
// precomputed pad states, copied on the stack: no allocation), from any
// thread, lock-free. Wall time comes from PickRequest::wall_now
// (InfinitePast reads absl::Now()).
#ifndef ASIDE_LIB_POLICIES_STICKY_H_
#define ASIDE_LIB_POLICIES_STICKY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

inline constexpr uint64_t kStickyIdSeed = 0x737469636b792d69ULL;
inline constexpr size_t kStickyTokenBytes = 49;
inline constexpr size_t kStickyTokenChars = 66;  // base64url of 49 bytes

// The id a token uses for the backend with this address.
uint64_t StickyBackendId(absl::string_view address);

// Issues and opens tokens for one key and group. Thread-safe (const);
// construction hashes the key once.
class StickyTokenCodec {
 public:
  StickyTokenCodec(absl::string_view key, absl::string_view group);
  ~StickyTokenCodec();
  StickyTokenCodec(const StickyTokenCodec&) = delete;
  StickyTokenCodec& operator=(const StickyTokenCodec&) = delete;

  // Writes a token for `backend_id` expiring at `expiry_unix_seconds`.
  void Issue(uint64_t backend_id, int64_t expiry_unix_seconds,
             SessionToken& out) const noexcept;
  // True when `token` is well formed and its signature verifies; fills the
  // backend id and expiry. Expiry is not checked here.
  bool Open(absl::string_view token, uint64_t* backend_id,
            int64_t* expiry_unix_seconds) const noexcept;

 private:
  struct Pads;
  void Mac(const unsigned char* payload, unsigned char* mac) const noexcept;
  std::unique_ptr<Pads> pads_;
};

absl::StatusOr<std::unique_ptr<const Selector>> BuildStickySelector(
    const SelectorInput& input, const PolicyConfig& config);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_STICKY_H_
