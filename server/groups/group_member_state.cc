#include "server/groups/group_member_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "server/base/log.h"
#include "server/health/slow_start.h"
#include "server/load/load_aggregator.h"

namespace aside::server {
namespace {

double Round3(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

GroupMemberState::GroupMemberState(std::string group, HealthRegistry* health,
                                   const OutlierSpec& outlier,
                                   const Clock* clock)
    : group_(std::move(group)),
      health_registry_(health),
      outliers_(outlier, clock) {}

void GroupMemberState::Sync(const GroupSpec& spec,
                            const std::vector<Backend>& backends, int64_t now) {
  std::map<std::string, MemberHealth, std::less<>> next;
  std::vector<std::string> addresses;
  addresses.reserve(backends.size());
  for (const Backend& b : backends) {
    addresses.push_back(b.address);
    MemberHealth entry;
    auto old = members_.find(b.address);
    if (old != members_.end()) {
      entry.added_nanos = old->second.added_nanos;
      if (old->second.handle.valid() &&
          old->second.handle.spec() == spec.health_check) {
        entry.handle = std::move(old->second.handle);
      }
    } else {
      entry.added_nanos = now;
    }
    if (!entry.handle.valid() && health_registry_ != nullptr &&
        spec.health_check.kind != HealthCheckSpec::Kind::kNone) {
      absl::StatusOr<HealthHandle> handle =
          health_registry_->Acquire(b.address, spec.health_check, group_);
      if (handle.ok()) {
        entry.handle = *std::move(handle);
      } else {
        Log(LogLevel::kWarn, "health.acquire_failed",
            {{"group", group_},
             {"address", b.address},
             {"error", std::string(handle.status().message())}});
      }
    }
    next.emplace(b.address, std::move(entry));
  }
  // Old handles are released only now, after the new ones exist.
  members_ = std::move(next);
  outliers_.SetMembers(addresses);
  // A changed spec may end ejections; the build that follows sees it.
  outliers_.SetSpec(spec.outlier);
}

std::vector<MemberStatus> GroupMemberState::Statuses(
    const std::vector<Backend>& backends, int64_t now) const {
  std::vector<MemberStatus> out;
  out.reserve(backends.size());
  for (const Backend& b : backends) {
    MemberStatus s;
    s.ejected = outliers_.IsEjected(b.address, now);
    auto it = members_.find(b.address);
    if (it != members_.end()) {
      const MemberHealth& m = it->second;
      if (m.handle.valid()) {
        s.health = m.handle.state();
        s.healthy = m.handle.ready();
        s.ramp_since = std::max(m.handle.ready_since_nanos(), m.added_nanos);
      } else {
        s.ramp_since = m.added_nanos;
      }
    }
    out.push_back(s);
  }
  return out;
}

std::vector<ZoneWeight> GroupMemberState::ZoneWeights(
    const GroupSpec& spec, const std::vector<Member>& members,
    const LoadAggregator* loads, int64_t now, absl::Time wall_now) {
  if (spec.policy.kind != PolicyKind::kLocality) {
    zones_.reset();
    return {};
  }
  if (zones_ == nullptr) {
    zones_ = std::make_unique<ZoneWeightCalculator>(spec.policy.locality);
  } else {
    zones_->set_params(spec.policy.locality);
  }
  std::vector<HostLoadReport> hosts;
  hosts.reserve(members.size());
  for (const Member& m : members) {
    HostLoadReport h;
    h.locality = m.backend.locality;
    h.ready = m.ready;
    if (loads != nullptr) {
      const LoadSnapshot l = loads->Snapshot(group_, m.backend.address);
      if (l.utilization.has_value()) {
        h.utilization = *l.utilization;
        h.reported_at_nanos =
            now - absl::ToInt64Nanoseconds(wall_now - l.utilization_at);
      }
    }
    hosts.push_back(std::move(h));
  }
  std::vector<ZoneWeight> weights = zones_->Update(hosts, now);
  for (ZoneWeight& z : weights) {
    z.weight = Round3(z.weight);
    z.utilization = z.utilization < 0 ? z.utilization : Round3(z.utilization);
  }
  return weights;
}

std::optional<int64_t> GroupMemberState::NextTimedRebuild(const GroupSpec& spec,
                                                          int64_t now) const {
  std::optional<int64_t> next = outliers_.NextExpiry();
  if (spec.policy.kind == PolicyKind::kLocality) {
    // Zone weights follow load reports every update_period.
    const int64_t tick =
        now + absl::ToInt64Nanoseconds(spec.policy.locality.update_period);
    if (!next || tick < *next) {
      next = tick;
    }
  }
  if (SlowStartApplies(spec)) {
    for (const auto& [address, m] : members_) {
      const int64_t since =
          m.handle.valid()
              ? std::max(m.handle.ready_since_nanos(), m.added_nanos)
              : m.added_nanos;
      std::optional<int64_t> tick =
          NextSlowStartRebuild(since, now, spec.slow_start);
      if (tick && (!next || *tick < *next)) {
        next = tick;
      }
    }
  }
  return next;
}

}  // namespace aside::server
