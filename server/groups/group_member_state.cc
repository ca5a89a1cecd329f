#include "server/groups/group_member_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"
#include "server/health/slow_start.h"
#include "server/load/load_aggregator.h"
#include "server/load/orca_collector.h"

namespace aside::server {
namespace {

double Round3(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

GroupMemberState::GroupMemberState(std::string group, HealthRegistry* health,
                                   const OutlierSpec& outlier,
                                   const Clock* clock, OrcaCollector* orca)
    : group_(std::move(group)),
      health_registry_(health),
      orca_(orca),
      orca_key_(absl::StrCat(group_, "@", reinterpret_cast<uintptr_t>(this))),
      outliers_(outlier, clock) {}

GroupMemberState::~GroupMemberState() {
  if (orca_ != nullptr && orca_wanted_) {
    orca_->Want(orca_key_, {}, absl::ZeroDuration());
  }
}

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
  if (orca_ != nullptr && (spec.orca.enabled || orca_wanted_)) {
    orca_wanted_ = spec.orca.enabled;
    orca_->Want(orca_key_,
                spec.orca.enabled ? addresses : std::vector<std::string>{},
                spec.orca.interval);
  }
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
    std::optional<OrcaCollector::Report> orca;
    if (orca_ != nullptr && spec.orca.enabled) {
      orca = orca_->Latest(m.backend.address);
    }
    if (orca.has_value()) {
      // The backend's own out-of-band report wins over a reporter's.
      h.utilization = OrcaUtilization(orca->load);
      h.reported_at_nanos = orca->received_nanos;
    } else if (loads != nullptr) {
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

std::vector<uint32_t> GroupMemberState::OrcaWeights(
    const GroupSpec& spec, const std::vector<Backend>& backends,
    const LoadAggregator* loads, int64_t now, absl::Time wall_now) {
  if (!OrcaWeightsApply(spec.orca, spec.policy)) {
    orca_members_.clear();
    return {};
  }
  OrcaWeightParams params;
  params.blackout_nanos = absl::ToInt64Nanoseconds(spec.orca.blackout_period);
  params.expiration_nanos =
      absl::ToInt64Nanoseconds(spec.orca.weight_expiration_period);
  params.error_utilization_penalty = spec.orca.error_utilization_penalty;
  std::map<std::string, MemberOrca, std::less<>> next;
  std::vector<double> weights;
  weights.reserve(backends.size());
  for (const Backend& b : backends) {
    MemberOrca m;
    if (auto old = orca_members_.find(b.address); old != orca_members_.end()) {
      m = old->second;
    }
    if (std::optional<OrcaCollector::Report> r =
            orca_ != nullptr ? orca_->Latest(b.address) : std::nullopt) {
      if (r->seq != m.seq) {
        m.weight.OnReport(r->load, r->received_nanos, params);
        m.seq = r->seq;
      }
    } else if (loads != nullptr) {
      const LoadSnapshot l = loads->Snapshot(group_, b.address);
      if (l.utilization.has_value() && l.utilization_at != m.call_report_at) {
        OrcaLoad load;
        load.cpu_utilization = *l.utilization;
        load.qps = l.requests_per_second;
        load.eps = l.requests_per_second * l.failure_ratio;
        m.weight.OnReport(
            load, now - absl::ToInt64Nanoseconds(wall_now - l.utilization_at),
            params);
        m.call_report_at = l.utilization_at;
      }
    }
    weights.push_back(b.weight == 0 ? 0 : m.weight.Weight(now, params));
    next.emplace(b.address, std::move(m));
  }
  orca_members_ = std::move(next);
  // A drained member (weight 0) stays out of the mean; the table build
  // keeps its configured 0 whatever its entry here.
  return OrcaTableWeights(weights);
}

std::optional<int64_t> GroupMemberState::NextTimedRebuild(const GroupSpec& spec,
                                                          int64_t now) const {
  std::optional<int64_t> next = outliers_.NextExpiry();
  if (OrcaWeightsApply(spec.orca, spec.policy)) {
    // Reports arrive every interval and the weights follow them (zone
    // utilisation follows on the locality policy's own ticks).
    const int64_t tick = now + absl::ToInt64Nanoseconds(spec.orca.interval);
    if (!next || tick < *next) {
      next = tick;
    }
  }
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
