// Builds the selector of a policy. The one place that knows every policy.
#ifndef ASIDE_LIB_SELECTOR_FACTORY_H_
#define ASIDE_LIB_SELECTOR_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "lib/policy_config.h"
#include "lib/selector.h"

namespace aside {

// Builds a selector for `config` over `input.members` of `input.table`.
// Fails with InvalidArgument when the policy cannot serve this table (for
// example a Maglev table smaller than the number of members).
absl::StatusOr<std::unique_ptr<const Selector>> BuildSelector(
    const PolicyConfig& config, const SelectorInput& input);

}  // namespace aside

#endif  // ASIDE_LIB_SELECTOR_FACTORY_H_
