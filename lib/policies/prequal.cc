#include "lib/policies/prequal.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <vector>

#include "lib/load/backend_load.h"
#include "lib/policies/pick_util.h"
#include "lib/table.h"

namespace aside {
namespace {

class PrequalSelector final : public Selector {
 public:
  struct Candidate {
    uint32_t index;
    const BackendLoad* load;
  };

  PrequalSelector(const Table& table, std::vector<Candidate> candidates,
                  std::vector<uint32_t> eligible, const PrequalParams& params)
      : table_(table),
        candidates_(std::move(candidates)),
        eligible_(std::move(eligible)),
        pool_size_(std::clamp<size_t>(params.pool_size, 1, kMaxPrequalPool)),
        max_age_nanos_(absl::ToInt64Nanoseconds(params.max_age)),
        hot_quantile_(params.hot_quantile),
        own_weight_(params.own_weight) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t k = candidates_.size();
    if (k == 0 || out.empty()) {
      return 0;
    }
    FastRng& rng = pick_internal::RngOf(request);
    const int64_t now = pick_internal::NowOf(request);

    // The pool: every candidate, or pool_size_ draws without repeats.
    std::array<Seen, kMaxPrequalPool> pool;
    size_t n = 0;
    auto add = [&](size_t pos) {
      const Candidate& c = candidates_[pos];
      if (pick_internal::Contains(request.exclude, c.index)) {
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        if (pool[i].candidate == &c) {
          return;
        }
      }
      pool[n++].candidate = &c;
    };
    if (k <= pool_size_) {
      for (size_t pos = 0; pos < k; ++pos) {
        add(pos);
      }
    } else {
      for (size_t draw = 0; draw < pool_size_; ++draw) {
        add(rng.Below(k));
      }
    }

    // What each one reports, fresh reports first.
    size_t fresh = 0;
    size_t explore = 0;
    for (size_t i = 0; i < n; ++i) {
      Seen& s = pool[i];
      const ReportedLoad r = s.candidate->load->Reported(own_weight_);
      s.fresh = r.at_nanos != 0 && now - r.at_nanos <= max_age_nanos_;
      if (s.fresh) {
        s.rif = r.rif;
        s.latency = r.latency_nanos;
        ++fresh;
      }
      const int64_t failed = s.candidate->load->last_failure_nanos();
      s.failed = failed != 0 && now - failed <= max_age_nanos_;
      // A backend reports only on the calls it answers: one that went
      // unpicked for max_age would never report, nor be picked, again.
      // Such a backend gets a call of this process's when it has none in
      // flight there, and that call's answer reports (a backend that failed
      // lately waits kExploreAfterFailure max_ages).
      s.explore =
          !s.fresh && s.candidate->load->in_flight() <= 0 &&
          (failed == 0 || now - failed > kExploreAfterFailure * max_age_nanos_);
      explore += s.explore ? 1 : 0;
    }
    if (fresh > 0 && explore > 0 && TakeExploration(now)) {
      size_t seen = 0;
      const Seen* chosen = nullptr;
      for (size_t i = 0; i < n; ++i) {
        if (pool[i].explore && rng.Below(++seen) == 0) {
          chosen = &pool[i];
        }
      }
      out[0] = chosen->candidate->index;
      size_t count = 1;
      if (count < out.size()) {
        count = pick_internal::FillByWalk(table_, request, eligible_,
                                          rng.Below(k), out, count);
      }
      return count;
    }
    if (fresh == 0) {
      // Nothing reported lately: this process's own view.
      const LoadModel& model = table_.load_model();
      for (size_t i = 0; i < n; ++i) {
        Seen& s = pool[i];
        s.rif = static_cast<double>(
            std::max<int64_t>(s.candidate->load->in_flight(), 0));
        s.latency = s.candidate->load->LastByteEwma(model);
        s.fresh = true;
      }
    }

    // The hot threshold: the quantile of the pool's RIFs.
    std::array<double, kMaxPrequalPool> rifs;
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (pool[i].fresh) {
        rifs[m++] = pool[i].rif;
      }
    }
    double threshold = 0;
    if (m > 0) {
      const size_t q = static_cast<size_t>(
          std::floor(hot_quantile_ * static_cast<double>(m - 1)));
      std::nth_element(rifs.begin(), rifs.begin() + q, rifs.begin() + m);
      threshold = rifs[q];
    }

    // Cold with the lowest latency, else the lowest RIF (failed ones last).
    const Seen* best = nullptr;
    bool best_cold = false;
    uint64_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
      const Seen& s = pool[i];
      if (!s.fresh) {
        continue;
      }
      const bool cold = !s.failed && s.rif <= threshold;
      int order;  // < 0: s is better than best
      if (best == nullptr) {
        order = -1;
      } else if (cold != best_cold) {
        order = cold ? -1 : 1;
      } else if (cold) {
        order = Compare(s.latency, best->latency, s.rif, best->rif);
      } else if (s.failed != best->failed) {
        order = s.failed ? 1 : -1;
      } else {
        order = Compare(s.rif, best->rif, s.latency, best->latency);
      }
      if (order < 0) {
        best = &s;
        best_cold = cold;
        ties = 1;
      } else if (order == 0 && rng.Below(++ties) == 0) {
        best = &s;  // each of the `ties` equal ones kept with 1/ties
      }
    }
    size_t count = 0;
    if (best != nullptr) {
      out[count++] = best->candidate->index;
    }
    if (count < out.size()) {
      count = pick_internal::FillByWalk(table_, request, eligible_,
                                        rng.Below(k), out, count);
    }
    return count;
  }

 private:
  struct Seen {
    const Candidate* candidate = nullptr;
    double rif = 0;
    double latency = 0;
    bool fresh = false;
    bool failed = false;
    bool explore = false;
  };

  // How many max_ages a backend that failed waits before a call explores
  // it (a sinkhole gets one call per process per 4 s, not per second).
  static constexpr int64_t kExploreAfterFailure = 4;
  static constexpr int64_t kExplorationsPerMaxAge = 4;

  // Whether a call may explore now: at most kExplorationsPerMaxAge per
  // max_age per selector (in a fleet of many clients and backends most
  // backends are unreported for each client, and exploring every one of
  // them would make the picks random).
  bool TakeExploration(int64_t now) const noexcept {
    int64_t next = next_exploration_nanos_.load(std::memory_order_relaxed);
    if (now < next) {
      return false;
    }
    return next_exploration_nanos_.compare_exchange_strong(
        next, now + max_age_nanos_ / kExplorationsPerMaxAge,
        std::memory_order_relaxed);
  }

  // Lexicographic (a, b) against (c, d): -1, 0 or 1.
  static int Compare(double a, double c, double b, double d) noexcept {
    if (a != c) {
      return a < c ? -1 : 1;
    }
    if (b != d) {
      return b < d ? -1 : 1;
    }
    return 0;
  }

  const Table& table_;
  std::vector<Candidate> candidates_;
  std::vector<uint32_t> eligible_;
  const size_t pool_size_;
  const int64_t max_age_nanos_;
  const double hot_quantile_;
  const double own_weight_;
  mutable std::atomic<int64_t> next_exploration_nanos_{0};
};

}  // namespace

std::unique_ptr<const Selector> MakePrequalSelector(
    const SelectorInput& input, const PrequalParams& params) {
  const Table& table = *input.table;
  std::vector<PrequalSelector::Candidate> candidates;
  std::vector<uint32_t> eligible;
  for (uint32_t index : input.members) {
    if (table.eligible(index)) {
      candidates.push_back({index, table.member(index).load});
      eligible.push_back(index);
    }
  }
  return std::make_unique<PrequalSelector>(table, std::move(candidates),
                                           std::move(eligible), params);
}

}  // namespace aside
