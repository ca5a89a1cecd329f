#include "lib/policies/least_time.h"

#include <algorithm>
#include <vector>

#include "lib/load/backend_load.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

// Choices made by scanning for the minimum; further fallbacks walk.
constexpr size_t kRankedChoices = 8;
// Estimates this close (relative) are equal: the same EWMA read a few
// microseconds older has returned a little further toward the default, and
// that must not decide every pick.
constexpr double kTie = 0.01;

class LeastTimeSelector final : public Selector {
 public:
  struct Candidate {
    uint32_t index;
    const BackendLoad* load;
  };

  LeastTimeSelector(const Table& table, std::vector<Candidate> candidates,
                    std::vector<uint32_t> eligible,
                    const LeastTimeParams& params)
      : table_(table),
        candidates_(std::move(candidates)),
        eligible_(std::move(eligible)),
        first_byte_(params.metric == LeastTimeParams::Metric::kFirstByte) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t k = candidates_.size();
    if (k == 0 || out.empty()) {
      return 0;
    }
    FastRng& rng = pick_internal::RngOf(request);
    const LoadModel& model = table_.load_model();
    const int64_t now = pick_internal::NowOf(request);
    size_t count = 0;
    while (count < out.size() && count < kRankedChoices) {
      const Candidate* best = nullptr;
      double best_time = 0;
      uint64_t ties = 0;
      for (const Candidate& c : candidates_) {
        if (pick_internal::Contains(request.exclude, c.index) ||
            pick_internal::Contains(out.subspan(0, count), c.index)) {
          continue;
        }
        const double t = c.load->LeastTimeCost(now, model, first_byte_);
        if (best == nullptr || t < best_time * (1 - kTie)) {
          best = &c;
          best_time = t;
          ties = 1;
        } else if (t <= best_time * (1 + kTie)) {
          // Within kTie of the lowest: a tie, each of the `ties` kept
          // with 1/ties.
          best_time = std::min(best_time, t);
          if (rng.Below(++ties) == 0) {
            best = &c;
          }
        }
      }
      if (best == nullptr) {
        return count;
      }
      out[count++] = best->index;
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, eligible_,
                                        rng.Below(k), out, count);
    }
    return count;
  }

 private:
  const Table& table_;
  std::vector<Candidate> candidates_;
  std::vector<uint32_t> eligible_;
  const bool first_byte_;
};

}  // namespace

std::unique_ptr<const Selector> MakeLeastTimeSelector(
    const SelectorInput& input, const LeastTimeParams& params) {
  const Table& table = *input.table;
  std::vector<LeastTimeSelector::Candidate> candidates;
  std::vector<uint32_t> eligible;
  for (uint32_t index : input.members) {
    if (table.eligible(index)) {
      candidates.push_back({index, table.member(index).load});
      eligible.push_back(index);
    }
  }
  return std::make_unique<LeastTimeSelector>(table, std::move(candidates),
                                             std::move(eligible), params);
}

}  // namespace aside
