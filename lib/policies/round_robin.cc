#include "lib/policies/round_robin.h"

#include <atomic>
#include <vector>

#include "lib/hash.h"
#include "lib/random.h"
#include "lib/table.h"

namespace aside {
namespace {

class RoundRobinSelector final : public Selector {
 public:
  explicit RoundRobinSelector(const SelectorInput& input)
      : table_(*input.table),
        members_(input.members.begin(), input.members.end()),
        modulo_(members_.size()),
        position_(members_.empty() ? 0 : ThreadRng().Below(members_.size())) {
    // Every member of the whole table eligible: position i is member i.
    trivial_ = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      trivial_ = trivial_ && members_[i] == i && table_.eligible(members_[i]);
    }
  }

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t n = members_.size();
    if (n == 0 || out.empty()) {
      return 0;
    }
    // The one shared step of this pick; fallbacks walk on from it locally.
    const uint64_t start =
        modulo_.Mod(position_.fetch_add(1, std::memory_order_relaxed));
    if (trivial_ && out.size() == 1 && request.exclude.empty()) {
      out[0] = static_cast<uint32_t>(start);  // one pick, no retry: no loads
      return 1;
    }
    size_t count = 0;
    for (size_t step = 0; step < n && count < out.size(); ++step) {
      size_t pos = start + step;
      if (pos >= n) {
        pos -= n;
      }
      const uint32_t index = members_[pos];
      if (table_.eligible(index) &&
          !pick_internal::Contains(request.exclude, index)) {
        out[count++] = index;
      }
    }
    return count;
  }

 private:
  const Table& table_;
  std::vector<uint32_t> members_;
  FastModulo modulo_;  // % members_.size() without a division
  bool trivial_ = false;
  // Padded so that picks on one group do not share a cache line with
  // anything else.
  alignas(64) mutable std::atomic<uint64_t> position_;
};

}  // namespace

std::unique_ptr<const Selector> MakeRoundRobinSelector(
    const SelectorInput& input) {
  return std::make_unique<RoundRobinSelector>(input);
}

}  // namespace aside
