#include "lib/selector_factory.h"

#include "absl/strings/str_cat.h"
#include "lib/policies/round_robin.h"
#include "lib/policies/weighted_round_robin.h"

namespace aside {

absl::StatusOr<std::unique_ptr<const Selector>> BuildSelector(
    const PolicyConfig& config, const SelectorInput& input) {
  switch (config.kind) {
    case PolicyKind::kRoundRobin:
      return MakeRoundRobinSelector(input);
    case PolicyKind::kWeightedRoundRobin:
      return MakeWeightedRoundRobinSelector(input);
    default:
      return absl::UnimplementedError(absl::StrCat(
          "policy '", config.name(), "' is not available in this build"));
  }
}

}  // namespace aside
