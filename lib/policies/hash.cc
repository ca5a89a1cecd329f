#include "lib/policies/hash.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "lib/hash.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

constexpr int kWeightedProbes = 8;

// Immutable; shared between selectors of consecutive tables.
struct HashSlots {
  // Reduced total weight: the modulus.
  uint64_t total = 0;
  FastModulo modulo;  // % total without a division, same result
  // Slot -> position in the selector's weighted member list (when total <=
  // kMaxHashSlots).
  std::vector<uint32_t> slots;
  // Otherwise: prefix[i] = sum of reduced weights of positions 0..i.
  std::vector<uint64_t> prefix;

  uint32_t PositionOf(uint64_t hash) const noexcept {
    const uint64_t r = modulo.Mod(hash);
    if (!slots.empty()) {
      return slots[r];
    }
    return static_cast<uint32_t>(
        std::upper_bound(prefix.begin(), prefix.end(), r) - prefix.begin());
  }
};

std::shared_ptr<const HashSlots> BuildSlots(
    const Table& table, absl::Span<const uint32_t> members) {
  auto s = std::make_shared<HashSlots>();
  uint64_t g = 0;
  for (uint32_t index : members) {
    g = std::gcd(g, static_cast<uint64_t>(table.member(index).weight));
  }
  if (g == 0) {
    return s;
  }
  for (uint32_t index : members) {
    s->total += table.member(index).weight / g;
  }
  s->modulo = FastModulo(s->total);
  if (s->total <= kMaxHashSlots) {
    s->slots.reserve(s->total);
    for (uint32_t pos = 0; pos < members.size(); ++pos) {
      const uint64_t w = table.member(members[pos]).weight / g;
      s->slots.insert(s->slots.end(), w, pos);
    }
  } else {
    s->prefix.reserve(members.size());
    uint64_t sum = 0;
    for (uint32_t index : members) {
      sum += table.member(index).weight / g;
      s->prefix.push_back(sum);
    }
  }
  return s;
}

class HashSelector final : public Selector {
 public:
  HashSelector(const Table& table, std::vector<uint32_t> members,
               std::shared_ptr<const HashSlots> slots)
      : table_(table), members_(std::move(members)), slots_(std::move(slots)) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    if (slots_->total == 0 || out.empty()) {
      return 0;
    }
    const uint64_t h = Fnv1a64(request.key);
    size_t count = 0;
    const uint32_t first = members_[slots_->PositionOf(h)];
    if (pick_internal::Acceptable(table_, request, out, count, first)) {
      out[count++] = first;
    }
    // Deterministic weighted probes, then a walk.
    for (int k = 1; k <= kWeightedProbes && count < out.size(); ++k) {
      const uint64_t hk =
          Mix64(h + static_cast<uint64_t>(k) * 0x9e3779b97f4a7c15ULL);
      const uint32_t index = members_[slots_->PositionOf(hk)];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, members_,
                                        ReduceTo(Mix64(h), members_.size()),
                                        out, count);
    }
    return count;
  }

  const Table& table() const { return table_; }
  const std::vector<uint32_t>& members() const { return members_; }
  const std::shared_ptr<const HashSlots>& slots() const { return slots_; }

 private:
  const Table& table_;
  // Members with weight > 0, in address order; slots hold positions here.
  std::vector<uint32_t> members_;
  std::shared_ptr<const HashSlots> slots_;
};

}  // namespace

std::unique_ptr<const Selector> MakeHashSelector(const SelectorInput& input) {
  const Table& table = *input.table;
  std::vector<uint32_t> members =
      pick_internal::WeightedMembers(table, input.members);
  std::shared_ptr<const HashSlots> slots;
  if (const auto* prev = dynamic_cast<const HashSelector*>(input.previous);
      prev != nullptr && pick_internal::SameMembersAndWeights(
                             prev->table(), prev->members(), table, members)) {
    slots = prev->slots();
  } else {
    slots = BuildSlots(table, members);
  }
  return std::make_unique<HashSelector>(table, std::move(members),
                                        std::move(slots));
}

const void* HashTableIdentityForTest(const Selector& selector) {
  const auto* s = dynamic_cast<const HashSelector*>(&selector);
  return s != nullptr ? s->slots().get() : nullptr;
}

}  // namespace aside
