// least_time: the member with the lowest latency EWMA times its requests in
// flight + 1 (Lolly's least-time, nginx Plus's least_time, which also counts
// active connections): time to first byte or to last byte, smoothed with
// `alpha` (BackendLoad::LeastTimeCost, lib/load/backend_load.h); a member
// without samples counts as default_latency so new members are not starved,
// and an estimate no completion refreshes returns toward default_latency
// (time constant 1 s), so a backend that was slow is tried again. Counting
// the calls in flight is what keeps the lowest estimate from taking every
// call until they time out: a backend whose calls queue costs more with each
// call sent to it, before any completes. Among minima within 1 % of each
// other one is chosen uniformly at random (reservoir sampling), so idle
// members with the default, or equal estimates aged a little differently,
// do not all send traffic to one of them.
// Weights only decide eligibility (weight 0 is never picked). Fallbacks are
// the next lowest, then a walk from a random position.
//
// Built per table on the control path (O(n)); Pick from any thread in O(n)
// per choice (it reads every eligible member's estimate), lock-free, no
// allocation.
#ifndef ASIDE_LIB_POLICIES_LEAST_TIME_H_
#define ASIDE_LIB_POLICIES_LEAST_TIME_H_

#include <memory>

#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

std::unique_ptr<const Selector> MakeLeastTimeSelector(
    const SelectorInput& input, const LeastTimeParams& params);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_LEAST_TIME_H_
