// The state a group keeps about its members beside the table: health
// handles (one per member, acquired from the shared HealthRegistry), when
// each member joined, outlier ejections from load reports, and the smoothed
// zone utilisation of the locality policy, and the ORCA weight state of
// each member (gRFC A58, from the OrcaCollector's out-of-band reports, for
// groups with an `orca:` block, which this subscribes to, else from the
// per-call reports stubs forward). A rebuild first brings this in
// line with the group's spec and members (Sync), then reads it to build the
// table (Statuses, ZoneWeights), then asks when time alone will change the
// table next (NextTimedRebuild: slow-start ramps, ejection expiries, zone
// weight updates).
//
// Thread rules: the owning Group calls Sync, Statuses, ZoneWeights and
// NextTimedRebuild with its mutex (Group::mu_) held; that mutex guards the
// handles, join times and zone smoothing here. outliers() is thread-safe
// on its own (OutlierDetector has its own lock): load reports reach it
// without the group's mutex.
#ifndef ASIDE_SERVER_GROUPS_GROUP_MEMBER_STATE_H_
#define ASIDE_SERVER_GROUPS_GROUP_MEMBER_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/load/orca_weight.h"
#include "lib/policies/locality.h"
#include "lib/table.h"
#include "server/groups/group_table_builder.h"
#include "server/health/health_registry.h"
#include "server/health/outlier_detector.h"
#include "server/schema/group_spec.h"

namespace aside::server {

class LoadAggregator;
class OrcaCollector;

class GroupMemberState {
 public:
  // `health` may be null (no probing: every member healthy); `orca` may be
  // null (no ORCA reports: `orca:` blocks change nothing).
  GroupMemberState(std::string group, HealthRegistry* health,
                   const OutlierSpec& outlier, const Clock* clock,
                   OrcaCollector* orca = nullptr);
  ~GroupMemberState();  // ends the group's ORCA subscription
  GroupMemberState(const GroupMemberState&) = delete;
  GroupMemberState& operator=(const GroupMemberState&) = delete;

  // Brings health handles and outlier members in line with `spec` and
  // `backends` at monotonic time `now`: new members get a handle (when the
  // spec probes) and a join time; a changed health check gets new handles;
  // handles of members that left are released after the new ones exist;
  // the ORCA subscription follows the spec's `orca` block and members.
  void Sync(const GroupSpec& spec, const std::vector<Backend>& backends,
            int64_t now);

  // Each backend's status at `now`, in the order of `backends` (after Sync
  // with the same backends).
  std::vector<MemberStatus> Statuses(const std::vector<Backend>& backends,
                                     int64_t now) const;

  // The locality policy's zone weights for `members` (rounded to 1/1000 so
  // that noise does not publish a generation); empty for other policies.
  // Advances the smoothing: call once per build.
  std::vector<ZoneWeight> ZoneWeights(const GroupSpec& spec,
                                      const std::vector<Member>& members,
                                      const LoadAggregator* loads, int64_t now,
                                      absl::Time wall_now);

  // The members' ORCA weights as table weights (in the order of
  // `backends`; a drained member's entry is not used), after
  // folding in the reports that arrived since the last call; empty when the
  // spec's weights do not follow ORCA or no member has a usable weight (the
  // configured weights stay). A member's reports are its out-of-band
  // stream's (the collector's); a member without one takes the per-call
  // reports the load reporters forwarded (`loads`, may be null): their
  // bounded utilisation over the reporters, with the rates the reporters
  // counted (qps: requests per second, eps: failures per second, over the
  // fleet's load window) in gRFC A58's formula.
  std::vector<uint32_t> OrcaWeights(const GroupSpec& spec,
                                    const std::vector<Backend>& backends,
                                    const LoadAggregator* loads, int64_t now,
                                    absl::Time wall_now);

  // When time alone next changes the table (a ramp step, an ejection
  // expiry, a zone weight update, the next ORCA report), as monotonic
  // nanoseconds; none when nothing is pending.
  std::optional<int64_t> NextTimedRebuild(const GroupSpec& spec,
                                          int64_t now) const;

  OutlierDetector& outliers() { return outliers_; }
  const OutlierDetector& outliers() const { return outliers_; }

 private:
  // Per member address: its probe handle and when it joined the group.
  struct MemberHealth {
    HealthHandle handle;
    int64_t added_nanos = 0;
  };

  // A member's ORCA weight state and the last report folded in.
  struct MemberOrca {
    OrcaEndpointWeight weight;
    uint64_t seq = 0;  // the out-of-band report's (OrcaCollector::Report)
    // When the reporters' utilisation last changed (LoadSnapshot).
    absl::Time call_report_at = absl::InfinitePast();
  };

  const std::string group_;
  HealthRegistry* const health_registry_;
  OrcaCollector* const orca_;
  // This object's name at the collector (groups of one name may overlap
  // while one is replaced).
  const std::string orca_key_;
  bool orca_wanted_ = false;
  std::map<std::string, MemberOrca, std::less<>> orca_members_;
  std::map<std::string, MemberHealth, std::less<>> members_;
  // Smoothed zone utilisation of the locality policy (null otherwise).
  std::unique_ptr<ZoneWeightCalculator> zones_;
  OutlierDetector outliers_;  // thread-safe
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_MEMBER_STATE_H_
