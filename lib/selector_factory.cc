#include "lib/selector_factory.h"

#include "absl/strings/str_cat.h"
#include "lib/policies/hash.h"
#include "lib/policies/ketama.h"
#include "lib/policies/least_time.h"
#include "lib/policies/locality.h"
#include "lib/policies/maglev.h"
#include "lib/policies/p2c.h"
#include "lib/policies/prequal.h"
#include "lib/policies/ring_hash.h"
#include "lib/policies/round_robin.h"
#include "lib/policies/sticky.h"
#include "lib/policies/weighted_random.h"
#include "lib/policies/weighted_round_robin.h"

namespace aside {

absl::StatusOr<std::unique_ptr<const Selector>> BuildSelector(
    const PolicyConfig& config, const SelectorInput& input) {
  switch (config.kind) {
    case PolicyKind::kRoundRobin:
      return MakeRoundRobinSelector(input);
    case PolicyKind::kWeightedRoundRobin:
      return MakeWeightedRoundRobinSelector(input);
    case PolicyKind::kRandom:
      return MakeRandomSelector(input);
    case PolicyKind::kHash:
      return MakeHashSelector(input);
    case PolicyKind::kKetama:
      return BuildKetamaSelector(input, config.ketama.points_per_weight);
    case PolicyKind::kMaglev:
      return BuildMaglevSelector(input, config.maglev.table_size);
    case PolicyKind::kP2c:
      return MakeP2cSelector(input, config.p2c);
    case PolicyKind::kLeastTime:
      return MakeLeastTimeSelector(input, config.least_time);
    case PolicyKind::kPrequal:
      return MakePrequalSelector(input, config.prequal);
    case PolicyKind::kSticky:
      return BuildStickySelector(input, config);
    case PolicyKind::kLocality:
      return BuildLocalitySelector(input, config);
    case PolicyKind::kRingHash:
      return BuildRingHashSelector(input, config.ring_hash.min_ring_size,
                                   config.ring_hash.max_ring_size);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy: invalid kind ", static_cast<int>(config.kind)));
}

}  // namespace aside
