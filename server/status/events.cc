#include "server/status/events.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/json.h"

namespace aside::server {
namespace {

void AssignCut(std::string* out, absl::string_view value) {
  const absl::string_view cut = value.substr(0, EventLog::kMaxFieldBytes);
  out->assign(cut.data(), cut.size());
}

bool Drained(const Member& m) {
  return m.backend.drained || m.backend.weight == 0;
}

}  // namespace

absl::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kHealth:
      return "health";
    case EventKind::kEjected:
      return "ejected";
    case EventKind::kReturned:
      return "returned";
    case EventKind::kDrained:
      return "drained";
    case EventKind::kUndrained:
      return "undrained";
    case EventKind::kBackendAdded:
      return "backend_added";
    case EventKind::kBackendRemoved:
      return "backend_removed";
    case EventKind::kGeneration:
      return "generation";
    case EventKind::kGroupAdded:
      return "group_added";
    case EventKind::kGroupRemoved:
      return "group_removed";
    case EventKind::kConfigReloaded:
      return "config_reloaded";
    case EventKind::kConfigReloadFailed:
      return "config_reload_failed";
    case EventKind::kStoreUp:
      return "store_up";
    case EventKind::kStoreDown:
      return "store_down";
    case EventKind::kMemberJoined:
      return "member_joined";
    case EventKind::kMemberLeft:
      return "member_left";
  }
  return "unknown";
}

EventLog::EventLog(const Clock* clock, size_t capacity)
    : clock_(clock), capacity_(std::max<size_t>(1, capacity)) {
  aside::MutexLock lock(&mu_);
  ring_.resize(capacity_);
}

void EventLog::Record(EventKind kind, absl::string_view group,
                      absl::string_view backend, absl::string_view cause) {
  const absl::Time now = clock_->WallNow();
  aside::MutexLock lock(&mu_);
  const uint64_t seq = next_seq_++;
  Event& e = ring_[(seq - 1) % capacity_];
  e.seq = seq;
  e.time = now;
  e.kind = kind;
  AssignCut(&e.group, group);
  AssignCut(&e.backend, backend);
  AssignCut(&e.cause, cause);
}

std::vector<Event> EventLog::List(absl::string_view group) const {
  std::vector<Event> out;
  aside::MutexLock lock(&mu_);
  const uint64_t last = next_seq_ - 1;
  const uint64_t first = last >= capacity_ ? last - capacity_ + 1 : 1;
  for (uint64_t seq = first; seq <= last; ++seq) {
    const Event& e = ring_[(seq - 1) % capacity_];
    if (!group.empty() && !e.group.empty() && e.group != group) {
      continue;
    }
    out.push_back(e);
  }
  return out;
}

uint64_t EventLog::recorded() const {
  aside::MutexLock lock(&mu_);
  return next_seq_ - 1;
}

uint64_t EventLog::dropped() const {
  aside::MutexLock lock(&mu_);
  const uint64_t recorded = next_seq_ - 1;
  return recorded > capacity_ ? recorded - capacity_ : 0;
}

std::string EventLog::Json(absl::string_view group) const {
  const std::vector<Event> events = List(group);
  const uint64_t total = recorded();
  std::string out =
      absl::StrCat("{\"capacity\":", capacity_, ",\"recorded\":", total,
                   ",\"dropped\":", total > capacity_ ? total - capacity_ : 0,
                   ",\"events\":[");
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    absl::StrAppend(&out, i == 0 ? "" : ",", "{\"seq\":", e.seq, ",\"time\":");
    AppendJsonString(&out, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", e.time,
                                            absl::UTCTimeZone()));
    absl::StrAppend(&out, ",\"time_unix_ms\":", absl::ToUnixMillis(e.time),
                    ",\"kind\":");
    AppendJsonString(&out, EventKindName(e.kind));
    out.append(",\"group\":");
    AppendJsonString(&out, e.group);
    out.append(",\"backend\":");
    AppendJsonString(&out, e.backend);
    out.append(",\"cause\":");
    AppendJsonString(&out, e.cause);
    out.push_back('}');
  }
  out.append("]}");
  return out;
}

HealthEvents::HealthEvents(HealthRegistry* health, EventRecorder* events)
    : health_(health) {
  observer_ = health_->AddObserver([events](const HealthTransition& t) {
    for (const std::string& name : t.groups) {
      events->Record(
          EventKind::kHealth, name, t.address,
          absl::StrCat(HealthStateName(t.from), " -> ", HealthStateName(t.to),
                       ": ", t.result.reason));
    }
  });
}

HealthEvents::~HealthEvents() { health_->RemoveObserver(observer_); }

PublicationEvents::PublicationEvents(GroupRegistry* registry,
                                     EventRecorder* events)
    : registry_(registry), events_(events) {
  registry_->AddListener(this);
  for (const GroupPtr& g : registry_->List()) {
    Seed(*g, g->table(), /*replace=*/false);
  }
}

PublicationEvents::~PublicationEvents() { registry_->RemoveListener(this); }

void PublicationEvents::OnAdded(Group& group, const TableConstPtr& table) {
  Seed(group, table, /*replace=*/true);
  events_->Record(EventKind::kGroupAdded, group.name(), "",
                  absl::StrCat("generation ", table->generation()));
}

void PublicationEvents::Seed(Group& group, const TableConstPtr& table,
                             bool replace) {
  absl::flat_hash_set<std::string> ejected;
  for (OutlierDetector::Ejection& e : group.Ejections()) {
    ejected.insert(std::move(e.address));
  }
  aside::MutexLock lock(&mu_);
  auto [it, inserted] = groups_.try_emplace(group.name());
  if (!inserted && !replace) {
    return;  // a publication got here first
  }
  GroupState& state = it->second;
  state.group = &group;
  state.generation = table->generation();
  state.backends.clear();
  for (const Member& m : table->members()) {
    state.backends[m.backend.address] = {Drained(m),
                                         ejected.contains(m.backend.address)};
  }
}

void PublicationEvents::OnPublish(Group& group, const TableConstPtr& table) {
  absl::flat_hash_map<std::string, OutlierDetector::Ejection> ejections;
  for (OutlierDetector::Ejection& e : group.Ejections()) {
    std::string address = e.address;
    ejections.emplace(std::move(address), std::move(e));
  }
  const std::string& name = group.name();
  aside::MutexLock lock(&mu_);
  GroupState& state = groups_[name];
  if (table->generation() <= state.generation) {
    return;  // seen already (Seed read the group after it was queued)
  }
  state.group = &group;
  state.generation = table->generation();
  events_->Record(EventKind::kGeneration, name, "",
                  absl::StrCat("generation ", table->generation(), ": ",
                               table->ready_count(), "/", table->size(),
                               " ready", table->panic() ? ", panic" : ""));
  absl::flat_hash_map<std::string, BackendState> next;
  next.reserve(table->size());
  for (const Member& m : table->members()) {
    const std::string& address = m.backend.address;
    auto e = ejections.find(address);
    const BackendState now{Drained(m), e != ejections.end()};
    next[address] = now;
    auto before = state.backends.find(address);
    if (before == state.backends.end()) {
      events_->Record(EventKind::kBackendAdded, name, address,
                      absl::StrCat("weight ", m.backend.weight,
                                   now.drained ? ", drained" : ""));
      continue;
    }
    if (now.drained != before->second.drained) {
      events_->Record(now.drained ? EventKind::kDrained : EventKind::kUndrained,
                      name, address,
                      now.drained
                          ? (m.backend.drained ? "drain flag set" : "weight 0")
                          : absl::StrCat("weight ", m.backend.weight));
    }
    if (now.ejected != before->second.ejected) {
      events_->Record(
          now.ejected ? EventKind::kEjected : EventKind::kReturned, name,
          address,
          now.ejected
              ? absl::StrCat("consecutive failures reported (ejection ",
                             e->second.count, ", until ",
                             absl::FormatTime("%H:%M:%S", e->second.until,
                                              absl::UTCTimeZone()),
                             ")")
              : "ejection ended");
    }
  }
  for (const auto& [address, unused] : state.backends) {
    if (!next.contains(address)) {
      events_->Record(EventKind::kBackendRemoved, name, address,
                      "no longer a member");
    }
  }
  state.backends = std::move(next);
}

void PublicationEvents::OnRemoved(Group& group, uint64_t generation) {
  {
    aside::MutexLock lock(&mu_);
    if (auto it = groups_.find(group.name());
        it != groups_.end() && it->second.group == &group) {
      groups_.erase(it);
    }
  }
  events_->Record(EventKind::kGroupRemoved, group.name(), "",
                  absl::StrCat("generation ", generation));
}

}  // namespace aside::server
