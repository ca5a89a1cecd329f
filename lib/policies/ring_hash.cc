#include "lib/policies/ring_hash.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/hash.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

// Ring entries visited for fallbacks before walking the member list.
constexpr size_t kRingWalkBase = 32;
constexpr size_t kRingWalkPerPick = 16;

struct SharedRing {
  std::vector<RingHashNode> nodes;
  uint64_t min_ring_size = 0;
  uint64_t max_ring_size = 0;
  RingHashRing ring;
};

class RingHashSelector final : public Selector {
 public:
  RingHashSelector(const Table& table, std::vector<uint32_t> members,
                   std::shared_ptr<const SharedRing> ring)
      : table_(table), members_(std::move(members)), ring_(std::move(ring)) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const RingHashRing& ring = ring_->ring;
    const size_t entries = ring.hashes.size();
    if (entries == 0 || out.empty()) {
      return 0;
    }
    const uint64_t h = XxHash64(request.key, 0);
    size_t start = static_cast<size_t>(
        std::lower_bound(ring.hashes.begin(), ring.hashes.end(), h) -
        ring.hashes.begin());
    if (start == entries) {
      start = 0;
    }
    const size_t limit =
        std::min(entries, kRingWalkBase + kRingWalkPerPick * out.size());
    size_t count = 0;
    for (size_t step = 0; step < limit && count < out.size(); ++step) {
      size_t i = start + step;
      if (i >= entries) {
        i -= entries;
      }
      const uint32_t index = members_[ring.positions[i]];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, members_,
                                        ring.positions[start] + 1, out, count);
    }
    return count;
  }

  const std::shared_ptr<const SharedRing>& shared() const { return ring_; }

 private:
  const Table& table_;
  // The ring's members (table indexes) in ring order; positions index it.
  std::vector<uint32_t> members_;
  std::shared_ptr<const SharedRing> ring_;
};

bool SameNodes(absl::Span<const RingHashNode> a,
               absl::Span<const RingHashNode> b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].weight != b[i].weight || a[i].name != b[i].name) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string RingHashSubZone(const Backend& backend) {
  return backend.locality.subzone.empty()
             ? backend.address
             : absl::StrCat(backend.locality.subzone, "/", backend.address);
}

std::string RingHashEndpointName(absl::string_view address) {
  absl::StatusOr<Address> a = ParseAddress(address);
  if (!a.ok() || !a->is_ip()) {
    return std::string(address);
  }
  return a->kind == Address::Kind::kIpv6
             ? absl::StrCat("[", a->host, "]:", a->port)
             : absl::StrCat(a->host, ":", a->port);
}

RingHashRing BuildRingHashRing(absl::Span<const RingHashNode> nodes,
                               uint64_t min_ring_size, uint64_t max_ring_size) {
  RingHashRing ring;
  uint64_t sum = 0;
  for (const RingHashNode& n : nodes) {
    sum += n.weight;
  }
  if (sum == 0) {
    return ring;
  }
  // Weight-0 nodes take no part (gRPC is never sent them).
  std::vector<double> normalized(nodes.size(), 0.0);
  double min_normalized = 1.0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].weight == 0) {
      continue;
    }
    normalized[i] =
        static_cast<double>(nodes[i].weight) / static_cast<double>(sum);
    min_normalized = std::min(min_normalized, normalized[i]);
  }
  const double scale =
      std::min(std::ceil(min_normalized * static_cast<double>(min_ring_size)) /
                   min_normalized,
               static_cast<double>(max_ring_size));
  const auto size = static_cast<size_t>(std::ceil(scale));
  std::vector<std::pair<uint64_t, uint32_t>> entries;
  entries.reserve(size);
  double current = 0;
  double target = 0;
  std::string key;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].weight == 0) {
      continue;
    }
    target += scale * normalized[i];
    key.assign(nodes[i].name);
    key.push_back('_');
    const size_t prefix = key.size();
    for (uint64_t count = 0; current < target; ++count) {
      key.resize(prefix);
      absl::StrAppend(&key, count);
      entries.emplace_back(XxHash64(key, 0), static_cast<uint32_t>(i));
      current += 1;
    }
  }
  std::sort(entries.begin(), entries.end());
  ring.hashes.reserve(entries.size());
  ring.positions.reserve(entries.size());
  for (const auto& [hash, position] : entries) {
    ring.hashes.push_back(hash);
    ring.positions.push_back(position);
  }
  return ring;
}

absl::StatusOr<std::unique_ptr<const Selector>> BuildRingHashSelector(
    const SelectorInput& input, uint64_t min_ring_size,
    uint64_t max_ring_size) {
  const Table& table = *input.table;
  std::vector<uint32_t> members;
  members.reserve(input.members.size());
  for (uint32_t index : input.members) {
    if (table.eligible(index) && table.member(index).weight > 0) {
      members.push_back(index);
    }
  }
  // gRPC's endpoint order: by locality (region, zone, encoded sub-zone).
  std::vector<std::string> sub_zones(table.size());
  for (uint32_t index : members) {
    sub_zones[index] = RingHashSubZone(table.member(index).backend);
  }
  std::stable_sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) {
    const Locality& x = table.member(a).backend.locality;
    const Locality& y = table.member(b).backend.locality;
    return std::tie(x.region, x.zone, sub_zones[a]) <
           std::tie(y.region, y.zone, sub_zones[b]);
  });
  std::vector<RingHashNode> nodes;
  nodes.reserve(members.size());
  for (uint32_t index : members) {
    const Member& m = table.member(index);
    nodes.push_back({RingHashEndpointName(m.backend.address), m.weight});
  }
  std::shared_ptr<const SharedRing> shared;
  const auto* prev = dynamic_cast<const RingHashSelector*>(input.previous);
  if (prev != nullptr && prev->shared()->min_ring_size == min_ring_size &&
      prev->shared()->max_ring_size == max_ring_size &&
      SameNodes(prev->shared()->nodes, nodes)) {
    shared = prev->shared();
  } else {
    auto built = std::make_shared<SharedRing>();
    built->ring = BuildRingHashRing(nodes, min_ring_size, max_ring_size);
    built->nodes = std::move(nodes);
    built->min_ring_size = min_ring_size;
    built->max_ring_size = max_ring_size;
    shared = std::move(built);
  }
  return std::unique_ptr<const Selector>(std::make_unique<RingHashSelector>(
      table, std::move(members), std::move(shared)));
}

const RingHashRing* RingHashRingForTest(const Selector& selector) {
  const auto* s = dynamic_cast<const RingHashSelector*>(&selector);
  return s != nullptr ? &s->shared()->ring : nullptr;
}

}  // namespace aside
