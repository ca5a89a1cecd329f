#include "lib/policies/p2c.h"

#include <algorithm>
#include <vector>

#include "lib/load/backend_load.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

class P2cSelector final : public Selector {
 public:
  struct Candidate {
    uint32_t index;
    uint32_t weight;
    const BackendLoad* load;
  };

  P2cSelector(const Table& table, std::vector<Candidate> candidates,
              std::vector<uint32_t> eligible, const P2cParams& params)
      : table_(table),
        candidates_(std::move(candidates)),
        eligible_(std::move(eligible)),
        peak_ewma_(params.load == P2cParams::Load::kPeakEwma) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t k = candidates_.size();
    if (k == 0 || out.empty()) {
      return 0;
    }
    FastRng& rng = pick_internal::RngOf(request);
    size_t count = 0;
    if (k >= 2) {
      // Floyd: a in [0, k-1), b in [0, k); a collision becomes k-1.
      size_t a = rng.Below(k - 1);
      const size_t b = rng.Below(k);
      if (a == b) {
        a = k - 1;
      }
      const Candidate& ca = candidates_[a];
      const Candidate& cb = candidates_[b];
      const bool ok_a = !pick_internal::Contains(request.exclude, ca.index);
      const bool ok_b = !pick_internal::Contains(request.exclude, cb.index);
      const Candidate* first = nullptr;
      const Candidate* second = nullptr;
      if (ok_a && ok_b) {
        if (Cheaper(cb, ca, request)) {
          first = &cb;
          second = &ca;
        } else {
          first = &ca;
          second = &cb;
        }
      } else if (ok_a) {
        first = &ca;
      } else if (ok_b) {
        first = &cb;
      }
      if (first != nullptr) {
        out[count++] = first->index;
        if (second != nullptr && count < out.size()) {
          out[count++] = second->index;
        }
      }
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, eligible_,
                                        rng.Below(k), out, count);
    }
    return count;
  }

 private:
  // cost(x) / weight(x) < cost(y) / weight(y), without dividing.
  bool Cheaper(const Candidate& x, const Candidate& y,
               const PickRequest& request) const noexcept {
    int64_t px = std::max<int64_t>(x.load->in_flight(), 0);
    int64_t py = std::max<int64_t>(y.load->in_flight(), 0);
    // Two backends without an RTT sample share one prior: their decayed
    // defaults differ only by when each was first seen, which says nothing
    // about either, and comparing them would order every pick by creation
    // time. Compare what is known, the requests in flight.
    if (peak_ewma_ && (x.load->has_rtt_sample() || y.load->has_rtt_sample())) {
      const int64_t now = pick_internal::NowOf(request);
      const LoadModel& model = table_.load_model();
      return x.load->PeakEwmaCost(now, model) * y.weight <
             y.load->PeakEwmaCost(now, model) * x.weight;
    }
    if (peak_ewma_) {
      // rtt × (pending + 1), the same rtt on both sides.
      ++px;
      ++py;
    }
    return px * static_cast<int64_t>(y.weight) <
           py * static_cast<int64_t>(x.weight);
  }

  const Table& table_;
  std::vector<Candidate> candidates_;
  std::vector<uint32_t> eligible_;
  const bool peak_ewma_;
};

}  // namespace

std::unique_ptr<const Selector> MakeP2cSelector(const SelectorInput& input,
                                                const P2cParams& params) {
  const Table& table = *input.table;
  std::vector<P2cSelector::Candidate> candidates;
  std::vector<uint32_t> eligible;
  for (uint32_t index : input.members) {
    if (table.eligible(index)) {
      const Member& m = table.member(index);
      candidates.push_back({index, m.weight, m.load});
      eligible.push_back(index);
    }
  }
  return std::make_unique<P2cSelector>(table, std::move(candidates),
                                       std::move(eligible), params);
}

}  // namespace aside
