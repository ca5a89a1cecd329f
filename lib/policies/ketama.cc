#include "lib/policies/ketama.h"

#include <algorithm>

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

// Stable LSD radix sort on the top 32 bits (the hash), 11+11+10 bits per
// pass: keys generated in position order stay in position order among
// equal hashes, which is the full (hash, position) order.
void RadixSortByHash(std::vector<uint64_t>& keys) {
  std::vector<uint64_t> tmp(keys.size());
  constexpr int kShifts[3] = {32, 43, 54};
  constexpr int kBits[3] = {11, 11, 10};
  std::vector<uint32_t> count(1u << 11);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const uint64_t mask = (uint64_t{1} << kBits[pass]) - 1;
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t k : keys) {
      ++count[(k >> shift) & mask];
    }
    uint32_t sum = 0;
    for (uint32_t& c : count) {
      const uint32_t x = c;
      c = sum;
      sum += x;
    }
    for (uint64_t k : keys) {
      tmp[count[(k >> shift) & mask]++] = k;
    }
    keys.swap(tmp);
  }
}

class KetamaSelector final : public Selector {
 public:
  KetamaSelector(const Table& table, std::vector<uint32_t> members,
                 std::shared_ptr<const KetamaRing> ring)
      : table_(table), members_(std::move(members)), ring_(std::move(ring)) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const KetamaRing& ring = *ring_;
    const size_t points = ring.size();
    if (points == 0 || out.empty()) {
      return 0;
    }
    const size_t start = ring.Find(Crc32(request.key));
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
      const uint32_t index = members_[ring.position_at(i)];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, members_,
                                        ring.position_at(start) + 1, out,
                                        count);
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
  ring->keys_.reserve(*points);
  for (uint32_t pos = 0; pos < nodes.size(); ++pos) {
    AppendPoints(nodes[pos], pos, points_per_weight, ring->keys_);
  }
  RadixSortByHash(ring->keys_);
  ring->BuildIndex();
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
    const int order = i == old_nodes.size()   ? 1
                      : j == new_nodes.size() ? -1
                                              : old_nodes[i].address.compare(
                                                    new_nodes[j].address);
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

  auto ring = std::shared_ptr<KetamaRing>(new KetamaRing());
  ring->points_per_weight_ = points_per_weight;
  ring->keys_.resize(*points);
  uint64_t* out = ring->keys_.data();
  const uint64_t* f = fresh.data();
  const uint64_t* const f_end = f + fresh.size();
  for (uint64_t key : previous.keys_) {
    const uint32_t pos = old_to_new[static_cast<uint32_t>(key)];
    if (pos == kGone) {
      continue;
    }
    // Positions keep their relative order, so remapped keys stay sorted.
    const uint64_t remapped = (key & ~uint64_t{0xffffffff}) | pos;
    while (f != f_end && *f < remapped) {
      *out++ = *f++;
    }
    *out++ = remapped;
  }
  while (f != f_end) {
    *out++ = *f++;
  }
  ring->BuildIndex();
  return std::shared_ptr<const KetamaRing>(std::move(ring));
}

void KetamaRing::BuildIndex() {
  const uint64_t n = keys_.size();
  uint32_t bits = 1;
  while ((uint64_t{1} << bits) < n / 2 && bits < 24) {
    ++bits;
  }
  shift_ = 32 - bits;
  const uint32_t buckets = 1u << bits;
  index_.assign(buckets + 1, static_cast<uint32_t>(n));
  size_t i = 0;
  for (uint32_t b = 0; b < buckets; ++b) {
    while (i < n && hash_at(i) >> shift_ < b) {
      ++i;
    }
    index_[b] = static_cast<uint32_t>(i);
  }
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
  return std::unique_ptr<const Selector>(
      std::make_unique<KetamaSelector>(table, std::move(members),
                                       std::move(ring)));
}

const KetamaRing* KetamaRingForTest(const Selector& selector) {
  const auto* s = dynamic_cast<const KetamaSelector*>(&selector);
  return s != nullptr ? s->ring().get() : nullptr;
}

}  // namespace aside
