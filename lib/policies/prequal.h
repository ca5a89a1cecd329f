// prequal: hot-cold lexicographic selection over the backends' own load
// (after Prequal, Wydrowski et al., NSDI 2024). Each pick draws a pool of
// `pool_size` backends at random (all of them when there are no more) and
// reads, for each, its requests in flight (RIF) and latency:
// - from its last report no older than `max_age` (per-call metrics on a
//   response, the fleet's load stream or a probe: BackendLoad::Report),
//   the RIF corrected by this process's own calls started since (counted
//   `own_weight` times, 1 by default), which is what keeps many clients
//   from herding onto the backend that reported least between two
//   reports;
// - when no backend of the pool has a fresh report, from this process's
//   own view: its calls in flight and its last-byte latency EWMA.
// A backend is hot when its RIF is above the `hot_quantile` of the pool's
// RIFs, or when a call to it failed within `max_age` (so that a backend
// failing fast while reporting no load, a sinkhole, is not the coldest).
// The pick is the cold backend with the lowest latency (ties: lower RIF,
// then uniformly at random); with none cold, the lowest RIF. Weights only
// decide eligibility. Fallbacks are a walk from a random position.
//
// Built per table on the control path (O(n)); Pick from any thread in
// O(pool_size), lock-free, no allocation.
#ifndef ASIDE_LIB_POLICIES_PREQUAL_H_
#define ASIDE_LIB_POLICIES_PREQUAL_H_

#include <memory>

#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

// The largest pool a pick reads (kPrequalPoolSize's upper bound).
inline constexpr size_t kMaxPrequalPool = 64;

std::unique_ptr<const Selector> MakePrequalSelector(
    const SelectorInput& input, const PrequalParams& params);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_PREQUAL_H_
