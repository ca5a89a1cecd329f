#include "lib/policies/maglev.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

// Following slots scanned for fallbacks before walking the member list.
constexpr size_t kSlotScanBase = 32;
constexpr size_t kSlotScanPerPick = 16;

// Immutable; shared between selectors of consecutive tables.
struct MaglevTable {
  uint64_t size = 0;
  // Slot -> position in the selector's weighted member list.
  std::vector<uint16_t> narrow;
  std::vector<uint32_t> wide;

  uint32_t at(uint64_t slot) const noexcept {
    return narrow.empty() ? wide[slot] : narrow[slot];
  }
};

class MaglevSelector final : public Selector {
 public:
  MaglevSelector(const Table& table, std::vector<uint32_t> members,
                 std::shared_ptr<const MaglevTable> lookup)
      : table_(table),
        members_(std::move(members)),
        lookup_(std::move(lookup)) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const MaglevTable& t = *lookup_;
    if (members_.empty() || out.empty()) {
      return 0;
    }
    const uint64_t slot = ReduceTo(Hash64(request.key, kMaglevKeySeed), t.size);
    size_t count = 0;
    const uint32_t first_pos = t.at(slot);
    const uint32_t first = members_[first_pos];
    if (pick_internal::Acceptable(table_, request, out, count, first)) {
      out[count++] = first;
      if (count == out.size()) {
        return count;
      }
    }
    const size_t limit =
        std::min<size_t>(t.size, kSlotScanBase + kSlotScanPerPick * out.size());
    for (size_t step = 1; step < limit && count < out.size(); ++step) {
      uint64_t s = slot + step;
      if (s >= t.size) {
        s -= t.size;
      }
      const uint32_t index = members_[t.at(s)];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, members_,
                                        first_pos + 1, out, count);
    }
    return count;
  }

  const Table& table() const { return table_; }
  const std::vector<uint32_t>& members() const { return members_; }
  const std::shared_ptr<const MaglevTable>& lookup() const { return lookup_; }

 private:
  const Table& table_;
  // Members with weight > 0, in address order; the table holds positions.
  std::vector<uint32_t> members_;
  std::shared_ptr<const MaglevTable> lookup_;
};

// The end of a population: the free slots listed, each turn taking the
// entry's first free slot in its permutation by arithmetic instead of by
// probing.
class LateFill {
 public:
  static constexpr uint64_t kNoInverse = ~uint64_t{0};

  explicit LateFill(uint64_t table_size)
      : size_(table_size),
        inverse_size_(1.0 / static_cast<double>(table_size)),
        threshold(std::max<uint64_t>(
            16, static_cast<uint64_t>(
                    std::sqrt(static_cast<double>(table_size) / 2)))) {}

  // Whether Take can serve an entry with `skip` (`inverse` caches skip^-1,
  // or kNoInverse when the table size is not a prime and skip shares a
  // factor with it). Lists the free slots of `taken` on first use.
  bool Ready(uint64_t skip, uint64_t& inverse,
             const std::vector<uint64_t>& taken) {
    if (!listed_) {
      listed_ = true;
      for (uint64_t c = 0; c < size_; ++c) {
        if (((taken[c >> 6] >> (c & 63)) & 1) == 0) {
          free_.push_back(c);
        }
      }
    }
    if (inverse == 0) {
      inverse = Inverse(skip);
    }
    return inverse != kNoInverse;
  }
  // The first free slot of the permutation next, next + skip, ... (at least
  // one is free), taken out of the list.
  uint64_t Take(uint64_t next, uint64_t inverse) {
    size_t best = 0;
    uint64_t best_k = size_;
    for (size_t i = 0; i < free_.size(); ++i) {
      const uint64_t d =
          free_[i] >= next ? free_[i] - next : free_[i] + size_ - next;
      const uint64_t k = MulMod(d, inverse);
      best = k < best_k ? i : best;
      best_k = k < best_k ? k : best_k;
    }
    const uint64_t c = free_[best];
    free_[best] = free_.back();
    free_.pop_back();
    return c;
  }
  // Takes slot `c`, found by probing, out of the list (if listed).
  void Erase(uint64_t c) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i] == c) {
        free_[i] = free_.back();
        free_.pop_back();
        return;
      }
    }
  }

 private:
  // a × b modulo the table size, for a, b below it (< 2^23, so the product
  // is exact in a double's mantissa and the quotient off by at most one).
  uint64_t MulMod(uint64_t a, uint64_t b) const {
    const uint64_t x = a * b;
    const uint64_t q =
        static_cast<uint64_t>(static_cast<double>(x) * inverse_size_);
    int64_t r = static_cast<int64_t>(x - q * size_);
    r += r < 0 ? static_cast<int64_t>(size_) : 0;
    r -= r >= static_cast<int64_t>(size_) ? static_cast<int64_t>(size_) : 0;
    return static_cast<uint64_t>(r);
  }
  // skip^-1 modulo the table size, by the extended Euclidean algorithm;
  // kNoInverse when they share a factor.
  uint64_t Inverse(uint64_t skip) const {
    int64_t r0 = static_cast<int64_t>(size_);
    int64_t r1 = static_cast<int64_t>(skip);
    int64_t t0 = 0;
    int64_t t1 = 1;
    while (r1 != 0) {
      const int64_t q = r0 / r1;
      std::tie(r0, r1) = std::make_pair(r1, r0 - q * r1);
      std::tie(t0, t1) = std::make_pair(t1, t0 - q * t1);
    }
    if (r0 != 1) {
      return kNoInverse;
    }
    return static_cast<uint64_t>(t0 < 0 ? t0 + static_cast<int64_t>(size_)
                                        : t0);
  }

  const uint64_t size_;
  const double inverse_size_;
  bool listed_ = false;
  std::vector<uint64_t> free_;

 public:
  // Free slots at or below which the list is used.
  const uint64_t threshold;
};

}  // namespace

std::vector<uint32_t> MaglevPopulate(absl::Span<const MaglevNode> nodes,
                                     uint64_t table_size) {
  constexpr uint32_t kEmpty = ~uint32_t{0};
  if (nodes.empty() || table_size < 2) {
    return {};
  }
  struct Entry {
    uint64_t next;  // the permutation's current slot
    uint64_t skip;
    uint64_t skip2;  // 2, 3 and 4 × skip, modulo the table size
    uint64_t skip3;
    uint64_t skip4;
    uint64_t inverse;  // skip^-1 modulo the table size; 0 until needed
    uint64_t target;   // the round at which this entry takes its next turn,
                       // scaled by its weight
    uint64_t weight;
    uint32_t position;
  };
  std::vector<Entry> entries;
  entries.reserve(nodes.size());
  uint64_t max_weight = 0;
  for (uint32_t pos = 0; pos < nodes.size(); ++pos) {
    if (nodes[pos].weight == 0) {
      continue;
    }
    const uint64_t offset =
        Hash64(nodes[pos].address, kMaglevOffsetSeed) % table_size;
    const uint64_t skip =
        Hash64(nodes[pos].address, kMaglevSkipSeed) % (table_size - 1) + 1;
    entries.push_back({offset, skip, 2 * skip % table_size,
                       3 * skip % table_size, 4 * skip % table_size, 0, 0,
                       nodes[pos].weight, pos});
    max_weight = std::max<uint64_t>(max_weight, nodes[pos].weight);
  }
  if (entries.empty()) {
    return {};
  }
  std::vector<uint32_t> table(table_size, kEmpty);
  // Occupancy as a bitmap: the probes (~M ln M of them) test bits in a few
  // KiB that stay in L1 instead of the table itself.
  std::vector<uint64_t> taken((table_size + 63) / 64, 0);
  auto is_taken = [&](uint64_t c) -> unsigned {
    return (taken[c >> 6] >> (c & 63)) & 1;
  };
  // a + b modulo the table size, for a, b < table_size.
  auto add_mod = [table_size](uint64_t a, uint64_t b) {
    const uint64_t c = a + b;
    return c >= table_size ? c - table_size : c;
  };
  // Four slots of the permutation per step, each computed from the first
  // alone so that the probes do not wait on one another's modulo; the first
  // free one of the four (in permutation order) is taken. Early in the fill
  // the first step nearly always finds one, so the loop's exit is
  // predictable.
  auto probe = [&](const Entry& e) {
    for (uint64_t c0 = e.next;; c0 = add_mod(c0, e.skip4)) {
      const uint64_t cs[4] = {c0, add_mod(c0, e.skip), add_mod(c0, e.skip2),
                              add_mod(c0, e.skip3)};
      const unsigned free = (is_taken(cs[0]) | is_taken(cs[1]) << 1 |
                             is_taken(cs[2]) << 2 | is_taken(cs[3]) << 3) ^
                            0xf;
      if (free != 0) {
        return cs[__builtin_ctz(free)];
      }
    }
  };
  // The last few slots: probing would take table_size / free probes per
  // slot; with the free slots listed, an entry's first one in its
  // permutation is the one with the smallest step count k, where
  // slot = next + k × skip, so k = (slot - next) × skip^-1 (the table size
  // is a prime): O(free) per slot. Worth it below sqrt(table_size / 2).
  LateFill late(table_size);
  uint64_t filled = 0;
  for (uint64_t round = 0; filled < table_size; ++round) {
    for (Entry& e : entries) {
      // Weight w takes a turn when round * w reaches its target, which
      // grows by max_weight per turn: w turns every max_weight rounds.
      if (round * e.weight < e.target) {
        continue;
      }
      e.target += max_weight;
      // Four slots of the permutation per step, each computed from the
      // first alone so that the probes do not wait on one another's
      // modulo; the first free one of the four (in permutation order) is
      // taken. Early in the fill the first step nearly always finds one, so
      // the loop's exit is predictable.
      uint64_t c;
      if (table_size - filled <= late.threshold &&
          late.Ready(e.skip, e.inverse, taken)) {
        c = late.Take(e.next, e.inverse);
      } else {
        c = probe(e);
        late.Erase(c);
      }
      table[c] = e.position;
      taken[c >> 6] |= uint64_t{1} << (c & 63);
      e.next = add_mod(c, e.skip);
      if (++filled == table_size) {
        break;
      }
    }
  }
  return table;
}

absl::StatusOr<std::unique_ptr<const Selector>> BuildMaglevSelector(
    const SelectorInput& input, uint64_t table_size) {
  const Table& table = *input.table;
  std::vector<uint32_t> members =
      pick_internal::WeightedMembers(table, input.members);
  if (members.size() > table_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.maglev.table_size: ", table_size, " is smaller than the ",
        members.size(), " backends with weight > 0"));
  }
  std::shared_ptr<const MaglevTable> lookup;
  const auto* prev = dynamic_cast<const MaglevSelector*>(input.previous);
  if (prev != nullptr && prev->lookup()->size == table_size &&
      pick_internal::SameMembersAndWeights(prev->table(), prev->members(),
                                           table, members)) {
    lookup = prev->lookup();
  } else {
    std::vector<MaglevNode> nodes;
    nodes.reserve(members.size());
    for (uint32_t index : members) {
      const Member& m = table.member(index);
      nodes.push_back({m.backend.address, m.weight});
    }
    auto t = std::make_shared<MaglevTable>();
    t->size = table_size;
    std::vector<uint32_t> slots = MaglevPopulate(nodes, table_size);
    if (members.size() <= 0xffff) {
      t->narrow.assign(slots.begin(), slots.end());
    } else {
      t->wide = std::move(slots);
    }
    lookup = std::move(t);
  }
  return std::unique_ptr<const Selector>(std::make_unique<MaglevSelector>(
      table, std::move(members), std::move(lookup)));
}

const void* MaglevTableIdentityForTest(const Selector& selector) {
  const auto* s = dynamic_cast<const MaglevSelector*>(&selector);
  return s != nullptr ? s->lookup().get() : nullptr;
}

}  // namespace aside
