#include "server/groups/health_follower.h"

#include <string>

#include "server/base/log.h"

namespace aside::server {

HealthFollower::HealthFollower(HealthRegistry* health, GroupRegistry* groups,
                               RebuildScheduler* scheduler,
                               absl::Duration merge_window)
    : health_(health),
      groups_(groups),
      scheduler_(scheduler),
      merge_window_(merge_window) {
  observer_ = health_->AddObserver(
      [this](const HealthTransition& t) { OnTransition(t); });
}

HealthFollower::~HealthFollower() { health_->RemoveObserver(observer_); }

void HealthFollower::OnTransition(const HealthTransition& t) {
  Log(t.to == HealthState::kUnhealthy ? LogLevel::kWarn : LogLevel::kInfo,
      "health.transition",
      {{"address", t.address},
       {"check", std::string(HealthCheckKindName(t.spec.kind))},
       {"from", std::string(HealthStateName(t.from))},
       {"to", std::string(HealthStateName(t.to))},
       {"reason", t.result.reason}});
  for (const std::string& name : t.groups) {
    if (GroupPtr g = groups_->Find(name)) {
      scheduler_->Schedule(g, merge_window_);
    }
  }
}

}  // namespace aside::server
