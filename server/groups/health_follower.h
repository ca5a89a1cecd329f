// How a probe result reaches the stubs. HealthRegistry runs the probes and
// decides each target's state; on a flip it tells its observers (prober
// thread). The follower is the groups' observer: it logs the flip
// (`event=health.transition`) and schedules a rebuild of every group that
// holds the target, once per merge window however many flips arrive
// (RebuildScheduler). The rebuilt table is published to every edge
// (GroupRegistry's publication), so a Watch stub, Pick, grpclb and xDS see
// it together.
//
// Thread-safe. Registers on construction; destruction detaches it and
// waits for a call in progress. The health registry, the group registry
// and the scheduler must outlive it.
#ifndef ASIDE_SERVER_GROUPS_HEALTH_FOLLOWER_H_
#define ASIDE_SERVER_GROUPS_HEALTH_FOLLOWER_H_

#include <cstdint>

#include "absl/time/time.h"
#include "server/groups/group_registry.h"
#include "server/groups/rebuild_scheduler.h"
#include "server/health/health_registry.h"

namespace aside::server {

class HealthFollower {
 public:
  HealthFollower(HealthRegistry* health, GroupRegistry* groups,
                 RebuildScheduler* scheduler, absl::Duration merge_window);
  ~HealthFollower();
  HealthFollower(const HealthFollower&) = delete;
  HealthFollower& operator=(const HealthFollower&) = delete;

 private:
  void OnTransition(const HealthTransition& t);

  HealthRegistry* const health_;
  GroupRegistry* const groups_;
  RebuildScheduler* const scheduler_;
  const absl::Duration merge_window_;
  uint64_t observer_ = 0;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_HEALTH_FOLLOWER_H_
