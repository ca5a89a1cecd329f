// p2c: the power of two choices (Mitzenmacher 1996; Tower's Balance, Envoy's
// least_request). Each pick draws two *distinct* eligible members uniformly
// (Floyd's two-sample: two draws, no loop) and takes the cheaper one; the
// other is the first fallback, then a walk from a random position. Costs,
// always divided by the member's weight:
// - `pending`: requests in flight (BackendLoad::in_flight);
// - `peak_ewma`: peak-EWMA RTT × (in flight + 1) (see lib/load/backend_load.h
//   for the estimate: peak on slower samples, exp(-dt/tau) decay, a new
//   backend costs default_rtt until its first sample).
// Two backends without an RTT sample compare by requests in flight alone
// (their defaults differ only by when each was first seen). Equal costs go to
// the first draw, itself uniform, so ties never favour an address. Time for the
// decay comes from PickRequest::now_nanos (0 reads the monotonic clock), so
// tests drive it.
//
// Built per table on the control path (O(n)); Pick from any thread, O(1)
// plus the fallbacks asked for: two loads read, lock-free, no allocation.
#ifndef ASIDE_LIB_POLICIES_P2C_H_
#define ASIDE_LIB_POLICIES_P2C_H_

#include <memory>

#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

std::unique_ptr<const Selector> MakeP2cSelector(const SelectorInput& input,
                                                const P2cParams& params);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_P2C_H_
