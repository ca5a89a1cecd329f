// weighted_round_robin: smooth weighted round robin. The selection sequence
// of one cycle is precomputed at build time (nginx's smooth algorithm, or an
// earliest-deadline-first schedule with the same exact counts for very large
// groups), so a pick is one atomic increment and one array read. Weights are
// reduced by their greatest common divisor; over one cycle each eligible
// member is picked exactly weight/gcd times, interleaved (5,1,1 gives
// a a b a c a a, not a a a a a b c).
//
// When the reduced weights sum past kMaxWrrCycle the weights are scaled down
// proportionally (each eligible member keeps at least 1), so counts are then
// exact for the scaled weights.
#ifndef ASIDE_LIB_POLICIES_WEIGHTED_ROUND_ROBIN_H_
#define ASIDE_LIB_POLICIES_WEIGHTED_ROUND_ROBIN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "lib/selector.h"

namespace aside {

inline constexpr uint64_t kMaxWrrCycle = uint64_t{1} << 20;

std::unique_ptr<const Selector> MakeWeightedRoundRobinSelector(
    const SelectorInput& input);

// The cycle for `weights` (positions into `weights`, zero weights never
// appear). Exposed for tests and benchmarks.
std::vector<uint32_t> SmoothWeightedCycle(absl::Span<const uint32_t> weights);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_WEIGHTED_ROUND_ROBIN_H_
