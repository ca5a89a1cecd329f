#include "lib/policies/ketama.h"

#include <algorithm>
#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

// Ring points visited for fallbacks before walking the member list.
constexpr size_t kRingWalkBase = 32;
constexpr size_t kRingWalkPerPick = 16;

absl::StatusOr<uint64_t> PointCount(absl::Span<const KetamaNode> nodes,
                                    uint32_t points_per_weight) {
  uint64_t weights = 0;
  for (const KetamaNode& n : nodes) {
    weights += n.weight;
  }
  const uint64_t points = weights * points_per_weight;
  if (points > kMaxKetamaPoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.ketama: weights summing to ", weights, " × points_per_weight ",
        points_per_weight, " make ", points, " ring points, more than ",
        kMaxKetamaPoints, "; lower the weights or points_per_weight"));
  }
  return points;
}

// Scratch kept per thread for the points of rings up to this size (2 MiB).
constexpr size_t kKeptScratchPoints = size_t{1} << 18;

// A buffer of at least `n` points: the thread's kept scratch, or `own` for a
// ring larger than kKeptScratchPoints.
uint64_t* ScratchPoints(size_t n, std::unique_ptr<uint64_t[]>& own) {
  if (n > kKeptScratchPoints) {
    own.reset(new uint64_t[n]);
    return own.get();
  }
  thread_local std::unique_ptr<uint64_t[]> kept;
  thread_local size_t kept_size = 0;
  if (kept_size < n) {
    // Grown to the largest ring this thread built, at least 4096 points.
    kept_size = std::max<size_t>({n, kept_size * 2, 4096});
    kept_size = std::min(kept_size, kKeptScratchPoints);
    kept.reset(new uint64_t[kept_size]);
  }
  return kept.get();
}

// Appends the points of node `position` to `keys`.
void AppendPoints(const KetamaNode& node, uint32_t position,
                  uint32_t points_per_weight, std::vector<uint64_t>& keys) {
  const uint32_t base = KetamaBaseHash(node.address);
  const uint64_t n = static_cast<uint64_t>(node.weight) * points_per_weight;
  uint32_t prev = 0;
  for (uint64_t j = 0; j < n; ++j) {
    const uint32_t h = Crc32UpdateWord(base, prev);
    keys.push_back((static_cast<uint64_t>(h) << 32) | position);
    prev = h;
  }
}

class KetamaSelector final : public Selector {
 public:
  KetamaSelector(const Table& table, std::vector<uint32_t> members,
                 std::shared_ptr<const KetamaRing> ring)
      : table_(table), members_(std::move(members)), ring_(std::move(ring)) {
    identity_ = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      identity_ = identity_ && members_[i] == i;
    }
  }

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const KetamaRing& ring = *ring_;
    const size_t points = ring.size();
    if (points == 0 || out.empty()) {
      return 0;
    }
    const size_t start = ring.Find(Crc32Short(request.key));
    const size_t limit =
        std::min(points, kRingWalkBase + kRingWalkPerPick * out.size());
    size_t count = 0;
    uint32_t prev_hash = 0;
    for (size_t step = 0; step < limit && count < out.size(); ++step) {
      size_t i = start + step;
      if (i >= points) {
        i -= points;
      }
      const uint32_t h = ring.hash_at(i);
      if (step > 0 && h == prev_hash) {
        continue;  // nginx keeps one point per hash
      }
      prev_hash = h;
      const uint32_t pos = ring.position_at(i);
      const uint32_t index = identity_ ? pos : members_[pos];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(
          table_, request, members_, ring.position_at(start) + 1, out, count);
    }
    return count;
  }

  const Table& table() const { return table_; }
  const std::vector<uint32_t>& members() const { return members_; }
  const std::shared_ptr<const KetamaRing>& ring() const { return ring_; }

 private:
  const Table& table_;
  // Members with weight > 0, in address order; ring positions index it.
  std::vector<uint32_t> members_;
  // members_[i] == i (every member has weight > 0, the group's own
  // selector): skip that lookup.
  bool identity_ = false;
  std::shared_ptr<const KetamaRing> ring_;
};

std::vector<KetamaNode> NodesOf(const Table& table,
                                absl::Span<const uint32_t> members) {
  std::vector<KetamaNode> nodes;
  nodes.reserve(members.size());
  for (uint32_t index : members) {
    const Member& m = table.member(index);
    nodes.push_back({m.backend.address, m.weight});
  }
  return nodes;
}

}  // namespace

KetamaHostPort SplitKetamaServer(absl::string_view server) {
  if (server.size() >= 5 &&
      absl::EqualsIgnoreCase(server.substr(0, 5), "unix:")) {
    return {server.substr(5), {}};
  }
  for (size_t j = 0; j < server.size(); ++j) {
    const char c = server[server.size() - j - 1];
    if (c == ':') {
      return {server.substr(0, server.size() - j - 1),
              server.substr(server.size() - j)};
    }
    if (c < '0' || c > '9') {
      break;
    }
  }
  return {server, {}};
}

uint32_t KetamaBaseHash(absl::string_view server) {
  const KetamaHostPort hp = SplitKetamaServer(server);
  uint32_t crc = Crc32(hp.host);
  crc = Crc32Update(crc, absl::string_view("\0", 1));
  return Crc32Update(crc, hp.port);
}

absl::StatusOr<std::shared_ptr<const KetamaRing>> KetamaRing::Build(
    absl::Span<const KetamaNode> nodes, uint32_t points_per_weight) {
  auto points = PointCount(nodes, points_per_weight);
  if (!points.ok()) {
    return points.status();
  }
  auto ring = std::shared_ptr<KetamaRing>(new KetamaRing());
  ring->points_per_weight_ = points_per_weight;
  // The points in position order are scratch: a buffer kept by the thread
  // across builds (fresh pages cost more than the sort itself), up to
  // kKeptScratchPoints; larger rings get one of their own.
  std::unique_ptr<uint64_t[]> own;
  uint64_t* generated = ScratchPoints(*points, own);
  // Counts of the top 8 bits of the hash, for the sort's first pass.
  std::array<uint32_t, 257> counts{};
  // Each point depends on the previous one of its node: generate four
  // nodes' chains in lockstep so the CRC steps overlap. Keys land in
  // position order; the first sort pass's counts are taken on the way.
  uint64_t offset = 0;
  for (size_t first = 0; first < nodes.size(); first += 4) {
    const size_t group = std::min<size_t>(4, nodes.size() - first);
    uint32_t base[4] = {};
    uint32_t prev[4] = {};
    uint64_t count[4] = {};
    uint64_t* out[4] = {};
    uint64_t common = ~uint64_t{0};
    for (size_t g = 0; g < group; ++g) {
      base[g] = KetamaBaseHash(nodes[first + g].address);
      count[g] = uint64_t{nodes[first + g].weight} * points_per_weight;
      out[g] = generated + offset;
      offset += count[g];
      common = std::min(common, count[g]);
    }
    auto emit = [&](size_t g, uint64_t j) {
      const uint32_t h = Crc32UpdateWord(base[g], prev[g]);
      const uint64_t key =
          (static_cast<uint64_t>(h) << 32) | static_cast<uint32_t>(first + g);
      out[g][j] = key;
      ++counts[(key >> 56) + 1];
      prev[g] = h;
    };
    uint64_t j = 0;
    if (group == 4) {
      for (; j < common; ++j) {
        emit(0, j);
        emit(1, j);
        emit(2, j);
        emit(3, j);
      }
    }
    for (size_t g = 0; g < group; ++g) {
      for (uint64_t k = j; k < count[g]; ++k) {
        emit(g, k);
      }
    }
  }
  ring->SortAndIndex(generated, *points, counts);
  return std::shared_ptr<const KetamaRing>(std::move(ring));
}

absl::StatusOr<std::shared_ptr<const KetamaRing>> KetamaRing::Update(
    const KetamaRing& previous, absl::Span<const KetamaNode> old_nodes,
    absl::Span<const KetamaNode> new_nodes, uint32_t points_per_weight) {
  auto points = PointCount(new_nodes, points_per_weight);
  if (!points.ok()) {
    return points.status();
  }
  if (previous.points_per_weight_ != points_per_weight) {
    return Build(new_nodes, points_per_weight);
  }
  constexpr uint32_t kGone = ~uint32_t{0};
  std::vector<uint32_t> old_to_new(old_nodes.size(), kGone);
  std::vector<uint32_t> fresh_nodes;
  uint64_t fresh_points = 0;
  size_t i = 0;
  size_t j = 0;
  while (i < old_nodes.size() || j < new_nodes.size()) {
    // <0: old_nodes[i] comes first (removed); >0: new_nodes[j] (added).
    const int order = i == old_nodes.size() ? 1
                      : j == new_nodes.size()
                          ? -1
                          : old_nodes[i].address.compare(new_nodes[j].address);
    if (order == 0) {
      if (old_nodes[i].weight == new_nodes[j].weight) {
        old_to_new[i] = static_cast<uint32_t>(j);
      } else {
        fresh_nodes.push_back(static_cast<uint32_t>(j));
        fresh_points += static_cast<uint64_t>(new_nodes[j].weight);
      }
      ++i;
      ++j;
    } else if (order < 0) {
      ++i;  // removed
    } else {
      fresh_nodes.push_back(static_cast<uint32_t>(j));
      fresh_points += static_cast<uint64_t>(new_nodes[j].weight);
      ++j;
    }
  }
  fresh_points *= points_per_weight;
  if (fresh_points * 4 > *points) {
    return Build(new_nodes, points_per_weight);  // merging would not pay
  }
  std::vector<uint64_t> fresh;
  fresh.reserve(fresh_points);
  for (uint32_t pos : fresh_nodes) {
    AppendPoints(new_nodes[pos], pos, points_per_weight, fresh);
  }
  std::sort(fresh.begin(), fresh.end());

  // The points to drop: those of removed and re-weighted nodes, generated
  // again with their old positions.
  std::vector<uint64_t> gone;
  for (uint32_t pos = 0; pos < old_nodes.size(); ++pos) {
    if (old_to_new[pos] == kGone) {
      AppendPoints(old_nodes[pos], pos, previous.points_per_weight_, gone);
    }
  }
  if (gone.size() * 4 > previous.size_ ||
      previous.size_ - gone.size() + fresh.size() != *points) {
    return Build(new_nodes, points_per_weight);
  }
  std::sort(gone.begin(), gone.end());

  auto ring = std::shared_ptr<KetamaRing>(new KetamaRing());
  ring->points_per_weight_ = points_per_weight;
  ring->size_ = *points;
  ring->keys_.reset(new uint64_t[ring->size_]);
  previous.MergeInto(*ring, old_to_new, gone, fresh);
  return std::shared_ptr<const KetamaRing>(std::move(ring));
}

void KetamaRing::MergeInto(KetamaRing& ring,
                           absl::Span<const uint32_t> old_to_new,
                           absl::Span<const uint64_t> gone,
                           absl::Span<const uint64_t> fresh) const {
  constexpr uint32_t kGone = ~uint32_t{0};
  constexpr uint64_t kHashBits = ~uint64_t{0xffffffff};
  const uint64_t* const keys = keys_.get();
  // Raw pointers: the per-key loop below has no bounds checks to pay.
  const uint32_t* const remap = old_to_new.data();
  // Where each dropped point is (keys are unique but for a node whose chain
  // repeats a hash: equal keys are adjacent, taken in turn).
  std::vector<size_t> gone_at(gone.size());
  for (size_t g = 0; g < gone.size(); ++g) {
    size_t i = g > 0 && gone[g] == gone[g - 1]
                   ? gone_at[g - 1] + 1
                   : LowerBound(static_cast<uint32_t>(gone[g] >> 32));
    while (keys[i] < gone[g]) {
      ++i;
    }
    gone_at[g] = i;
  }
  // Where each new point goes: before the first kept point ordered after
  // it once its position is remapped (positions keep their relative order,
  // so remapped keys stay sorted).
  std::vector<size_t> insert_at(fresh.size());
  for (size_t f = 0; f < fresh.size(); ++f) {
    size_t i = LowerBound(static_cast<uint32_t>(fresh[f] >> 32));
    while (i < size_ && (keys[i] & kHashBits) == (fresh[f] & kHashBits)) {
      const uint32_t pos = old_to_new[static_cast<uint32_t>(keys[i])];
      if (pos != kGone && ((keys[i] & kHashBits) | pos) > fresh[f]) {
        break;
      }
      ++i;
    }
    insert_at[f] = i;
  }
  // Runs of kept points between those events are remapped without a
  // branch.
  uint64_t* out = ring.keys_.get();
  size_t i = 0;
  size_t g = 0;
  size_t f = 0;
  for (;;) {
    const size_t next = std::min(g < gone.size() ? gone_at[g] : size_,
                                 f < fresh.size() ? insert_at[f] : size_);
    for (; i < next; ++i) {
      const uint64_t key = keys[i];
      *out++ = (key & kHashBits) | remap[static_cast<uint32_t>(key)];
    }
    if (f < fresh.size() && insert_at[f] == i) {
      *out++ = fresh[f++];
    } else if (g < gone.size() && gone_at[g] == i) {
      ++i;
      ++g;
    } else {
      break;  // i == size_, every event taken
    }
  }
  // The bucket index: the previous one shifted by the points added and
  // dropped before each bucket, when the ring keeps its index size.
  if (IndexShift(ring.size_) != shift_) {
    ring.BuildIndex();
    return;
  }
  ring.shift_ = shift_;
  ring.index_ = index_;
  const uint32_t bucket_shift = 32 + shift_;
  uint32_t* const index = ring.index_.data();
  const size_t buckets = index_.size();
  size_t b = 0;
  int64_t delta = 0;
  g = 0;
  f = 0;
  while (g < gone.size() || f < fresh.size()) {
    const bool add =
        g == gone.size() || (f < fresh.size() && fresh[f] < gone[g]);
    const size_t at = (add ? fresh[f] : gone[g]) >> bucket_shift;
    for (; b <= at; ++b) {
      index[b] = static_cast<uint32_t>(index[b] + delta);
    }
    if (add) {
      ++delta;
      ++f;
    } else {
      --delta;
      ++g;
    }
  }
  for (; b < buckets; ++b) {
    index[b] = static_cast<uint32_t>(index[b] + delta);
  }
}

size_t KetamaRing::LowerBound(uint32_t hash) const noexcept {
  const uint32_t b = hash >> shift_;
  size_t i = index_[b];
  const size_t end = index_[b + 1];
  const uint64_t key = static_cast<uint64_t>(hash) << 32;
  while (i < end && keys_[i] < key) {
    ++i;
  }
  return i;
}

uint32_t KetamaRing::IndexShift(uint64_t n) {
  uint32_t bits = 1;
  while ((uint64_t{1} << bits) < n / 2 && bits < 24) {
    ++bits;
  }
  return 32 - bits;
}

void KetamaRing::SizeIndex(uint64_t n) {
  shift_ = IndexShift(n);
  index_.assign((size_t{1} << (32 - shift_)) + 1, 0);
}

void KetamaRing::BuildIndex() {
  SizeIndex(size_);
  // Points per bucket, then prefix sums: index_[b] = points in buckets
  // before b. No data-dependent branches.
  const uint32_t shift = 32 + shift_;  // bucket of a key
  for (size_t i = 0; i < size_; ++i) {
    ++index_[(keys_[i] >> shift) + 1];
  }
  for (size_t b = 1; b < index_.size(); ++b) {
    index_[b] += index_[b - 1];
  }
}

void KetamaRing::SortAndIndex(uint64_t* generated, size_t n,
                              std::array<uint32_t, 257>& top) {
  // A two-level counting sort on the hash, most significant bits first: 8
  // bits (256 write streams) from `generated` into keys_, then, inside each
  // of those ranges (which stay in cache), the index's remaining bits, so
  // that the second level's counts are the bucket index itself. The hashes
  // are uniform, so what is left unsorted is runs of about two keys (one
  // index bucket): a bubble pass and an insertion pass over the range
  // finish it. Every pass is stable and keys are in position order to
  // begin with, and the final pass compares whole keys, so equal hashes end
  // in position order.
  size_ = n;
  keys_.reset(new uint64_t[n]);
  SizeIndex(n);
  const uint32_t bits = 32 - shift_;
  if (bits <= 8) {
    std::copy(generated, generated + n, keys_.get());
    std::sort(keys_.get(), keys_.get() + n);
    BuildIndex();
    return;
  }
  for (size_t b = 1; b < top.size(); ++b) {
    top[b] += top[b - 1];
  }
  uint64_t* const keys = keys_.get();
  {
    std::array<uint32_t, 256> cursor;
    std::copy(top.begin(), top.end() - 1, cursor.begin());
    for (size_t i = 0; i < n; ++i) {
      const uint64_t key = generated[i];
      keys[cursor[key >> 56]++] = key;
    }
  }
  const uint32_t sub_bits = bits - 8;
  const uint64_t sub_mask = (uint64_t{1} << sub_bits) - 1;
  const uint32_t bucket_shift = 32 + shift_;  // key >> it: the bucket
  std::vector<uint32_t> cursor(size_t{1} << sub_bits);
  uint32_t* const index = index_.data();
  for (size_t t = 0; t < 256; ++t) {
    const uint32_t lo = top[t];
    const uint32_t hi = top[t + 1];
    // Bucket (t, s) is index_[base + s]; its count goes to the next entry
    // first, and the prefix sums move each start into place. `generated`
    // is free again: it takes this range's keys back to scatter them.
    uint32_t* const starts = index + (t << sub_bits);
    for (uint32_t i = lo; i < hi; ++i) {
      const uint64_t key = keys[i];
      generated[i] = key;
      ++starts[((key >> bucket_shift) & sub_mask) + 1];
    }
    uint32_t sum = lo;
    for (size_t b = 0; b <= sub_mask; ++b) {
      const uint32_t c = starts[b + 1];
      starts[b] = sum;
      cursor[b] = sum;
      sum += c;
    }
    for (uint32_t i = lo; i < hi; ++i) {
      const uint64_t key = generated[i];
      keys[cursor[(key >> bucket_shift) & sub_mask]++] = key;
    }
    if (hi - lo < 2) {
      continue;
    }
    // The range is sorted by bucket, about two keys each, in random order
    // within one: a branch-free bubble pass (which sorts every bucket of
    // two) and then an insertion pass, which has little left to move, so
    // its branches are predictable. Both while the range is in cache.
    uint64_t carry = keys[lo];
    for (uint32_t i = lo + 1; i < hi; ++i) {
      const uint64_t x = keys[i];
      keys[i - 1] = std::min(carry, x);
      carry = std::max(carry, x);
    }
    keys[hi - 1] = carry;
    for (uint32_t i = lo + 1; i < hi; ++i) {
      const uint64_t x = keys[i];
      uint32_t j = i;
      while (j > lo && keys[j - 1] > x) {
        keys[j] = keys[j - 1];
        --j;
      }
      keys[j] = x;
    }
  }
  index[index_.size() - 1] = static_cast<uint32_t>(n);
}

absl::StatusOr<std::unique_ptr<const Selector>> BuildKetamaSelector(
    const SelectorInput& input, uint32_t points_per_weight) {
  const Table& table = *input.table;
  std::vector<uint32_t> members =
      pick_internal::WeightedMembers(table, input.members);
  std::shared_ptr<const KetamaRing> ring;
  const auto* prev = dynamic_cast<const KetamaSelector*>(input.previous);
  if (prev != nullptr &&
      prev->ring()->points_per_weight() == points_per_weight) {
    if (pick_internal::SameMembersAndWeights(prev->table(), prev->members(),
                                             table, members)) {
      ring = prev->ring();
    } else {
      auto updated = KetamaRing::Update(
          *prev->ring(), NodesOf(prev->table(), prev->members()),
          NodesOf(table, members), points_per_weight);
      if (!updated.ok()) {
        return updated.status();
      }
      ring = *std::move(updated);
    }
  } else {
    auto built = KetamaRing::Build(NodesOf(table, members), points_per_weight);
    if (!built.ok()) {
      return built.status();
    }
    ring = *std::move(built);
  }
  return std::unique_ptr<const Selector>(std::make_unique<KetamaSelector>(
      table, std::move(members), std::move(ring)));
}

const KetamaRing* KetamaRingForTest(const Selector& selector) {
  const auto* s = dynamic_cast<const KetamaSelector*>(&selector);
  return s != nullptr ? s->ring().get() : nullptr;
}

}  // namespace aside
