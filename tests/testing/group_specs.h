// A plain group for tests of what follows groups (edges, the event
// timeline): weighted round robin, no health checks, each backend of
// weight 100.
#ifndef ASIDE_TESTS_TESTING_GROUP_SPECS_H_
#define ASIDE_TESTS_TESTING_GROUP_SPECS_H_

#include <string>
#include <utility>
#include <vector>

#include "server/schema/group_spec.h"

namespace aside::testing {

inline server::GroupSpec PlainGroup(const std::string& name,
                                    std::vector<std::string> addresses) {
  server::GroupSpec spec;
  spec.name = name;
  spec.policy.kind = PolicyKind::kWeightedRoundRobin;
  spec.health_check.kind = server::HealthCheckSpec::Kind::kNone;
  for (std::string& address : addresses) {
    Backend b;
    b.address = std::move(address);
    b.weight = 100;
    spec.backends.push_back(std::move(b));
  }
  return spec;
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_GROUP_SPECS_H_
