// Building a group's table from its state: pure functions, no locks, no
// clock, no side effects. The group (group.h) gathers the inputs
// (declared and discovered members, each member's health, ejection and
// slow-start origin, zone weights) and decides whether and when to publish;
// this file only says what the table would be and whether it differs from
// the published one.
//
// Thread-safety: every function is pure and may be called from any thread.
#ifndef ASIDE_SERVER_GROUPS_GROUP_TABLE_BUILDER_H_
#define ASIDE_SERVER_GROUPS_GROUP_TABLE_BUILDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "lib/backend.h"
#include "lib/table.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// What a table needs to know about one member beyond its declared backend.
struct MemberStatus {
  // The probe state; HEALTHY for a member nobody probes.
  HealthState health = HealthState::kHealthy;
  // Ready as far as health goes (HEALTHY, or UNKNOWN without
  // require_first_probe; always for a member nobody probes).
  bool healthy = true;
  // Ejected by outlier detection at the build's time.
  bool ejected = false;
  // Monotonic time the member's slow-start ramp counts from (when it last
  // became ready or joined the group, whichever is later); none when
  // unknown (no ramp).
  std::optional<int64_t> ramp_since;
  // The weight from the backend's ORCA reports (gRFC A58), replacing the
  // configured one; 0: none (the configured weight stays).
  uint32_t orca_weight = 0;
};

// The declared members, then the discovered ones whose address is not
// declared (a declared entry wins on a clash), in that order.
std::vector<Backend> MergeMembers(const std::vector<Backend>& declared,
                                  const std::vector<Backend>& discovered);

// Whether `spec` ramps weights up after a member becomes ready. Hash
// policies keep their configured weights: a ramp would move keys.
bool SlowStartApplies(const GroupSpec& spec);

// The table `spec` makes from `backends` (statuses[i] belongs to
// backends[i]) at monotonic time `now`: members sorted by address with
// their readiness and effective weight. The generation is left 0 and the
// zone weights empty: the group fills them in.
TableSpec BuildTableSpec(const GroupSpec& spec,
                         const std::vector<Backend>& backends,
                         absl::Span<const MemberStatus> statuses,
                         std::shared_ptr<const std::string> session_key,
                         int64_t now);

// Whether a table built from `next` would show a pick or a Watch subscriber
// exactly what `published` shows (everything but the generation): then
// there is nothing to publish. `next` must come from BuildTableSpec (members
// sorted by address).
bool SameTable(const TableSpec& next, const Table& published);

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_TABLE_BUILDER_H_
