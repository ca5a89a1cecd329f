// random: weighted random. Each pick draws member i with probability
// weight_i / sum of eligible weights, exactly (Vose's alias method over
// integers: one uniform column, one uniform threshold). Fallbacks are
// further weighted draws that skip members already chosen, and once a few
// draws found nothing new, a walk from a random position; each eligible
// member appears at most once.
//
// Built per table on the control path (O(n)); Pick from any thread, O(1)
// plus the fallbacks asked for, lock-free, no allocation.
#ifndef ASIDE_LIB_POLICIES_WEIGHTED_RANDOM_H_
#define ASIDE_LIB_POLICIES_WEIGHTED_RANDOM_H_

#include <memory>

#include "lib/selector.h"

namespace aside {

std::unique_ptr<const Selector> MakeRandomSelector(const SelectorInput& input);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_WEIGHTED_RANDOM_H_
