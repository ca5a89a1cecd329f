// round_robin: one shared position advanced once per pick from a random
// start; weights are ignored (weight 0 still means never picked).
// Build O(n); pick O(1) when the next member is eligible, O(n) worst case.
#ifndef ASIDE_LIB_POLICIES_ROUND_ROBIN_H_
#define ASIDE_LIB_POLICIES_ROUND_ROBIN_H_

#include <memory>

#include "lib/selector.h"

namespace aside {

std::unique_ptr<const Selector> MakeRoundRobinSelector(
    const SelectorInput& input);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_ROUND_ROBIN_H_
