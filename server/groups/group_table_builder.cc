#include "server/groups/group_table_builder.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "server/health/slow_start.h"

namespace aside::server {

std::vector<Backend> MergeMembers(const std::vector<Backend>& declared,
                                  const std::vector<Backend>& discovered) {
  std::vector<Backend> out = declared;
  if (discovered.empty()) {
    return out;
  }
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(declared.size());
  for (const Backend& b : declared) {
    seen.insert(b.address);
  }
  for (const Backend& b : discovered) {
    if (!seen.contains(b.address)) {
      out.push_back(b);
    }
  }
  return out;
}

bool SlowStartApplies(const GroupSpec& spec) {
  return spec.slow_start > absl::ZeroDuration() &&
         !IsHashPolicy(spec.policy.kind);
}

TableSpec BuildTableSpec(const GroupSpec& spec,
                         const std::vector<Backend>& backends,
                         absl::Span<const MemberStatus> statuses,
                         std::shared_ptr<const std::string> session_key,
                         int64_t now) {
  TableSpec ts;
  ts.group = spec.name;
  ts.policy = spec.policy;
  ts.panic_threshold = spec.panic_threshold;
  ts.session_key = std::move(session_key);
  const bool slow_start = SlowStartApplies(spec);
  ts.members.reserve(backends.size());
  for (size_t i = 0; i < backends.size(); ++i) {
    const Backend& b = backends[i];
    const MemberStatus& status = statuses[i];
    Member m;
    m.backend = b;
    const uint32_t weight =
        status.orca_weight > 0 && b.weight > 0 ? status.orca_weight : b.weight;
    m.weight = weight;
    m.health = status.health;
    m.ready = !b.drained && status.healthy && !status.ejected;
    if (slow_start && m.ready && status.ramp_since.has_value()) {
      m.weight =
          SlowStartWeight(weight, *status.ramp_since, now, spec.slow_start);
    }
    ts.members.push_back(std::move(m));
  }
  std::sort(ts.members.begin(), ts.members.end(),
            [](const Member& a, const Member& b) {
              return a.backend.address < b.backend.address;
            });
  return ts;
}

bool SameTable(const TableSpec& next, const Table& published) {
  if (next.members.size() != published.size() ||
      next.panic_threshold != published.panic_threshold() ||
      !(next.policy == published.policy()) ||
      next.zone_weights != published.zone_weights() ||
      next.session_key != published.session_key()) {
    return false;
  }
  // Eligibility and panic follow from these and the panic threshold.
  for (uint32_t i = 0; i < published.size(); ++i) {
    const Member& x = next.members[i];
    const Member& y = published.member(i);
    if (!(x.backend == y.backend) || x.weight != y.weight ||
        x.ready != y.ready || x.health != y.health) {
      return false;
    }
  }
  return true;
}

}  // namespace aside::server
