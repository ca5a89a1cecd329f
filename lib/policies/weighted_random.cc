#include "lib/policies/weighted_random.h"

#include <vector>

#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

// Weighted draws tried for fallbacks before walking.
constexpr int kFallbackDraws = 16;

class RandomSelector final : public Selector {
 public:
  struct Column {
    uint64_t threshold;  // draw r < threshold keeps `self`, else `alias`
    uint32_t self;
    uint32_t alias;
  };

  RandomSelector(const Table& table, std::vector<uint32_t> eligible,
                 std::vector<Column> columns, uint64_t total)
      : table_(table),
        eligible_(std::move(eligible)),
        columns_(std::move(columns)),
        total_(total) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t n = columns_.size();
    if (n == 0 || out.empty()) {
      return 0;
    }
    FastRng& rng = pick_internal::RngOf(request);
    size_t count = 0;
    int draws = 0;
    while (count < out.size() && draws < kFallbackDraws + 1) {
      ++draws;
      const Column& c = columns_[rng.Below(n)];
      const uint32_t index = rng.Below(total_) < c.threshold ? c.self : c.alias;
      if (!pick_internal::Contains(request.exclude, index) &&
          !pick_internal::Contains(out.subspan(0, count), index)) {
        out[count++] = index;
      }
    }
    if (count < out.size() && count < n) {
      count = pick_internal::FillByWalk(table_, request, eligible_,
                                        rng.Below(n), out, count);
    }
    return count;
  }

 private:
  const Table& table_;
  std::vector<uint32_t> eligible_;
  std::vector<Column> columns_;
  uint64_t total_;
};

}  // namespace

std::unique_ptr<const Selector> MakeRandomSelector(const SelectorInput& input) {
  const Table& table = *input.table;
  std::vector<uint32_t> eligible;
  std::vector<uint64_t> scaled;
  uint64_t total = 0;
  for (uint32_t index : input.members) {
    if (table.eligible(index)) {
      eligible.push_back(index);
      total += table.member(index).weight;
    }
  }
  const size_t n = eligible.size();
  std::vector<RandomSelector::Column> columns(n);
  // Vose's alias method in integers: column capacity `total`, member i
  // brings weight_i * n.
  std::vector<uint32_t> small;
  std::vector<uint32_t> large;
  scaled.resize(n);
  for (size_t i = 0; i < n; ++i) {
    scaled[i] = static_cast<uint64_t>(table.member(eligible[i]).weight) * n;
    (scaled[i] < total ? small : large).push_back(static_cast<uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const uint32_t l = small.back();
    small.pop_back();
    const uint32_t g = large.back();
    columns[l] = {scaled[l], eligible[l], eligible[g]};
    scaled[g] -= total - scaled[l];
    if (scaled[g] < total) {
      large.pop_back();
      small.push_back(g);
    }
  }
  for (uint32_t i : large) {
    columns[i] = {total, eligible[i], eligible[i]};
  }
  for (uint32_t i : small) {  // only through rounding; cannot happen in ints
    columns[i] = {total, eligible[i], eligible[i]};
  }
  return std::make_unique<RandomSelector>(table, std::move(eligible),
                                          std::move(columns), total);
}

}  // namespace aside
