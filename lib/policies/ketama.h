// ketama: nginx's `hash $key consistent` (ngx_http_upstream_hash_module,
// nginx 1.22), point for point, so Aside picks what nginx picks for every
// key.
//
// The ring: for each member with weight > 0, base = crc32(HOST "\0" PORT),
// HOST and PORT split at the last ':' followed only by digits, as nginx
// splits the `server` text ("[::1]:80" -> "[::1]", "80"; Pingora hashes the
// IP without brackets, so it differs for IPv6). The member gets
// weight × points_per_weight points (nginx: 160); point i is crc32 continued
// from base over the previous point's 4 little-endian bytes (the first over
// 0). Points are sorted by hash; among equal hashes the member that comes
// first (address order, nginx: config order) owns the point. A key hashes to
// crc32(key) and goes to the first point >= that hash, wrapping. Weight 0
// members have no points (nginx rejects weight=0; Pingora panics on it).
//
// Fallbacks walk the ring from that point (as nginx does when a peer is
// down), skipping duplicates, members already chosen, excluded and
// ineligible ones; after a bounded walk they continue over the members in
// address order from the first choice. Deterministic for the key.
//
// The ring is built over members and weights only, never readiness: it is
// shared with the previous table's selector when addresses, weights and
// points_per_weight are unchanged, and when a few members changed it is
// updated by merging (O(points)) rather than rebuilt and sorted.
//
// Build: O(points) (radix sort); pick: O(1) expected (a bucket index over the
// top bits of the hash, then a short scan), from any thread, lock-free, no
// allocation. Memory: 8 bytes per point plus ~2 bytes per point of index; a
// thread that builds rings keeps a scratch buffer of up to 2 MiB (the
// largest ring it built, up to 256 Ki points) across builds.
#ifndef ASIDE_LIB_POLICIES_KETAMA_H_
#define ASIDE_LIB_POLICIES_KETAMA_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/selector.h"

namespace aside {

// At most this many points per ring (128 MiB of points); tables past it are
// rejected with the sizes named.
inline constexpr uint64_t kMaxKetamaPoints = uint64_t{1} << 24;

// nginx's split of a server name into host and port.
struct KetamaHostPort {
  absl::string_view host;
  absl::string_view port;
};
KetamaHostPort SplitKetamaServer(absl::string_view server);
// crc32(HOST "\0" PORT).
uint32_t KetamaBaseHash(absl::string_view server);

struct KetamaNode {
  absl::string_view address;
  uint32_t weight = 0;
};

// An immutable sorted ring. Thread-safe after construction.
class KetamaRing {
 public:
  // Builds the ring of `nodes` (positions 0..n-1 in the given order, which
  // decides which node owns a hash shared by two points).
  static absl::StatusOr<std::shared_ptr<const KetamaRing>> Build(
      absl::Span<const KetamaNode> nodes, uint32_t points_per_weight);

  // `previous` was built over `old_nodes`; returns the ring of `new_nodes`
  // by dropping the points of removed or re-weighted nodes and merging the
  // points of added or re-weighted ones. Both node lists must be sorted by
  // address. Equal to Build(new_nodes, ...).
  static absl::StatusOr<std::shared_ptr<const KetamaRing>> Update(
      const KetamaRing& previous, absl::Span<const KetamaNode> old_nodes,
      absl::Span<const KetamaNode> new_nodes, uint32_t points_per_weight);

  size_t size() const { return size_; }
  uint32_t points_per_weight() const { return points_per_weight_; }
  uint32_t hash_at(size_t i) const {
    return static_cast<uint32_t>(keys_[i] >> 32);
  }
  uint32_t position_at(size_t i) const {
    return static_cast<uint32_t>(keys_[i]);
  }
  // Index of the first point whose hash is >= `hash` (0 past the end).
  // Requires size() > 0.
  size_t Find(uint32_t hash) const noexcept {
    const uint32_t b = hash >> shift_;
    size_t i = index_[b];
    const size_t end = index_[b + 1];
    const uint64_t key = static_cast<uint64_t>(hash) << 32;
    while (i < end && keys_[i] < key) {
      ++i;
    }
    return i == size_ ? 0 : i;
  }

 private:
  KetamaRing() = default;
  // Index of the first point whose hash is >= `hash` (size() past the
  // end).
  size_t LowerBound(uint32_t hash) const noexcept;
  // Writes into `ring` (keys_ allocated, size_ set) this ring's points less
  // `gone`, with positions mapped through `old_to_new`, plus `fresh` (both
  // sorted), and its index.
  void MergeInto(KetamaRing& ring, absl::Span<const uint32_t> old_to_new,
                 absl::Span<const uint64_t> gone,
                 absl::Span<const uint64_t> fresh) const;
  // The shift_ of a ring of `n` points (about two points per bucket).
  static uint32_t IndexShift(uint64_t n);
  // Sizes the bucket index for `n` points (about two points per bucket).
  void SizeIndex(uint64_t n);
  // Fills index_ from the sorted keys_.
  void BuildIndex();
  // Sorts `generated` (n keys in position order; `top` counts them by the
  // top 8 bits of the hash, shifted by one) into keys_ and builds index_;
  // `generated` is scratch, overwritten.
  void SortAndIndex(uint64_t* generated, size_t n,
                    std::array<uint32_t, 257>& top);

  uint32_t points_per_weight_ = 160;
  // (hash << 32) | position, ascending: sorted by hash, then position.
  // Not value-initialised: every element is written by the build.
  std::unique_ptr<uint64_t[]> keys_;
  size_t size_ = 0;
  // index_[b] = first point whose hash >> shift_ >= b; 2^bits + 1 entries.
  std::vector<uint32_t> index_;
  uint32_t shift_ = 31;
};

absl::StatusOr<std::unique_ptr<const Selector>> BuildKetamaSelector(
    const SelectorInput& input, uint32_t points_per_weight);

// The ring a ketama selector uses (tests check it is shared); null for
// other selectors.
const KetamaRing* KetamaRingForTest(const Selector& selector);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_KETAMA_H_
