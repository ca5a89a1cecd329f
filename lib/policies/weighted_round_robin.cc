#include "lib/policies/weighted_round_robin.h"

#include <atomic>
#include <cmath>
#include <memory>
#include <numeric>
#include <queue>

#include "lib/hash.h"
#include "lib/random.h"
#include "lib/table.h"

namespace aside {
namespace {

// nginx's smooth weighted round robin, O(cycle × n).
std::vector<uint32_t> NginxCycle(absl::Span<const uint64_t> w, uint64_t total) {
  auto current = std::make_unique<int64_t[]>(w.size());
  std::vector<uint32_t> out;
  out.reserve(total);
  for (uint64_t step = 0; step < total; ++step) {
    size_t best = 0;
    bool found = false;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) {
        continue;
      }
      current[i] += static_cast<int64_t>(w[i]);
      if (!found || current[i] > current[best]) {
        best = i;
        found = true;
      }
    }
    current[best] -= static_cast<int64_t>(total);
    out.push_back(static_cast<uint32_t>(best));
  }
  return out;
}

// Earliest deadline first: member i's k-th turn (k from 1) is due at k / w_i;
// over one cycle exactly w_i turns fall at or before 1. O(cycle × log n).
std::vector<uint32_t> EdfCycle(absl::Span<const uint64_t> w, uint64_t total) {
  struct Turn {
    uint64_t k;  // turn number
    uint64_t w;
    uint32_t index;
  };
  // a before b when k_a / w_a < k_b / w_b, ties by index.
  auto later = [](const Turn& a, const Turn& b) {
    const __uint128_t lhs = static_cast<__uint128_t>(a.k) * b.w;
    const __uint128_t rhs = static_cast<__uint128_t>(b.k) * a.w;
    return lhs != rhs ? lhs > rhs : a.index > b.index;
  };
  std::priority_queue<Turn, std::vector<Turn>, decltype(later)> heap(later);
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0) {
      heap.push({1, w[i], static_cast<uint32_t>(i)});
    }
  }
  std::vector<uint32_t> out;
  out.reserve(total);
  while (out.size() < total && !heap.empty()) {
    Turn t = heap.top();
    heap.pop();
    out.push_back(t.index);
    ++t.k;
    heap.push(t);
  }
  return out;
}

class WeightedRoundRobinSelector final : public Selector {
 public:
  WeightedRoundRobinSelector(const Table& table, std::vector<uint32_t> cycle,
                             size_t distinct)
      : table_(table),
        cycle_(std::move(cycle)),
        distinct_(distinct),
        modulo_(cycle_.size()),
        position_(cycle_.empty() ? 0 : ThreadRng().Below(cycle_.size())) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t n = cycle_.size();
    if (n == 0 || out.empty()) {
      return 0;
    }
    const uint64_t start =
        modulo_.Mod(position_.fetch_add(1, std::memory_order_relaxed));
    const uint32_t first = cycle_[start];
    if (out.size() == 1 && request.exclude.empty()) {
      out[0] = first;  // the common case: one pick, no retry
      return 1;
    }
    size_t count = 0;
    if (!pick_internal::Contains(request.exclude, first)) {
      out[count++] = first;
    }
    // Fallbacks: walk on through the cycle, each distinct member once.
    for (size_t step = 1; step < n && count < out.size() && count < distinct_;
         ++step) {
      size_t pos = start + step;
      if (pos >= n) {
        pos -= n;
      }
      const uint32_t index = cycle_[pos];
      if (pick_internal::Acceptable(table_, request, out, count, index)) {
        out[count++] = index;
      }
    }
    return count;
  }

 private:
  const Table& table_;
  // Table member indexes, one cycle. Only eligible members appear.
  std::vector<uint32_t> cycle_;
  size_t distinct_;
  FastModulo modulo_;  // % cycle_.size() without a division
  alignas(64) mutable std::atomic<uint64_t> position_;
};

}  // namespace

std::vector<uint32_t> SmoothWeightedCycle(absl::Span<const uint32_t> weights) {
  uint64_t g = 0;
  for (uint32_t w : weights) {
    g = std::gcd(g, static_cast<uint64_t>(w));
  }
  if (g == 0) {
    return {};
  }
  std::vector<uint64_t> w(weights.size());
  uint64_t total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    w[i] = weights[i] / g;
    total += w[i];
  }
  if (total > kMaxWrrCycle) {
    const double scale =
        static_cast<double>(kMaxWrrCycle) / static_cast<double>(total);
    total = 0;
    for (uint64_t& x : w) {
      if (x > 0) {
        x = std::max<uint64_t>(
            1,
            static_cast<uint64_t>(std::floor(static_cast<double>(x) * scale)));
        total += x;
      }
    }
  }
  size_t nonzero = 0;
  for (uint64_t x : w) {
    nonzero += x > 0 ? 1 : 0;
  }
  if (total * nonzero <= (uint64_t{1} << 26)) {
    return NginxCycle(w, total);
  }
  return EdfCycle(w, total);
}

std::unique_ptr<const Selector> MakeWeightedRoundRobinSelector(
    const SelectorInput& input) {
  const Table& table = *input.table;
  std::vector<uint32_t> indexes;
  std::vector<uint32_t> weights;
  for (uint32_t index : input.members) {
    if (table.eligible(index)) {
      indexes.push_back(index);
      weights.push_back(table.member(index).weight);
    }
  }
  std::vector<uint32_t> cycle = SmoothWeightedCycle(weights);
  for (uint32_t& pos : cycle) {
    pos = indexes[pos];
  }
  return std::make_unique<WeightedRoundRobinSelector>(table, std::move(cycle),
                                                      indexes.size());
}

}  // namespace aside
