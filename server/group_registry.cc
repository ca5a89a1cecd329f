#include "server/group_registry.h"

#include <openssl/rand.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"

namespace aside::server {

Group::Group(GroupSpec spec, GenerationSource* generations, Metrics* metrics,
             std::shared_ptr<const std::string> session_key)
    : name_(spec.name),
      generations_(generations),
      metrics_(metrics),
      session_key_(std::move(session_key)),
      spec_(std::move(spec)) {
  if (metrics_ != nullptr) {
    group_metrics_.picks_ok =
        &metrics_->picks.Add({{"group", name_}, {"result", "ok"}});
    group_metrics_.picks_unavailable =
        &metrics_->picks.Add({{"group", name_}, {"result", "unavailable"}});
    group_metrics_.picks_invalid =
        &metrics_->picks.Add({{"group", name_}, {"result", "invalid"}});
    group_metrics_.ready =
        &metrics_->group_backends.Add({{"group", name_}, {"state", "ready"}});
    group_metrics_.total =
        &metrics_->group_backends.Add({{"group", name_}, {"state", "total"}});
    group_metrics_.panic = &metrics_->group_panic.Add({{"group", name_}});
    group_metrics_.generation =
        &metrics_->group_generation.Add({{"group", name_}});
    group_metrics_.rebuilds = &metrics_->table_rebuilds.Add({{"group", name_}});
  }
}

Group::~Group() {
  if (metrics_ != nullptr) {
    metrics_->picks.Remove(group_metrics_.picks_ok);
    metrics_->picks.Remove(group_metrics_.picks_unavailable);
    metrics_->picks.Remove(group_metrics_.picks_invalid);
    metrics_->group_backends.Remove(group_metrics_.ready);
    metrics_->group_backends.Remove(group_metrics_.total);
    metrics_->group_panic.Remove(group_metrics_.panic);
    metrics_->group_generation.Remove(group_metrics_.generation);
    metrics_->table_rebuilds.Remove(group_metrics_.rebuilds);
  }
}

GroupSpec Group::spec() const {
  absl::MutexLock lock(&mu_);
  return spec_;
}

absl::Status Group::Init() {
  absl::MutexLock lock(&mu_);
  return PublishLocked(spec_);
}

absl::Status Group::Update(GroupSpec spec) {
  absl::MutexLock lock(&mu_);
  ASIDE_RETURN_IF_ERROR(PublishLocked(spec));
  spec_ = std::move(spec);
  return absl::OkStatus();
}

absl::Status Group::PublishLocked(const GroupSpec& spec) {
  const int64_t start = MonotonicNanos();
  TableSpec ts;
  ts.group = spec.name;
  ts.generation = generations_->Next();
  ts.policy = spec.policy;
  ts.panic_threshold = spec.panic_threshold;
  ts.session_key = session_key_;
  ts.members.reserve(spec.backends.size());
  for (const Backend& b : spec.backends) {
    Member m;
    m.backend = b;
    m.weight = b.weight;
    m.ready = !b.drained;
    m.health = spec.health_check.kind == HealthCheckSpec::Kind::kNone
                   ? HealthState::kHealthy
                   : HealthState::kUnknown;
    ts.members.push_back(std::move(m));
  }
  TableConstPtr previous = table_.Acquire();
  ASIDE_ASSIGN_OR_RETURN(
      TableConstPtr table,
      Table::Create(std::move(ts), previous.get(), &loads_));
  table_.Publish(table);
  loads_.Prune();
  if (metrics_ != nullptr) {
    group_metrics_.ready->Set(table->ready_count());
    group_metrics_.total->Set(static_cast<double>(table->size()));
    group_metrics_.panic->Set(table->panic() ? 1 : 0);
    group_metrics_.generation->Set(static_cast<double>(table->generation()));
    group_metrics_.rebuilds->Increment();
    metrics_->table_rebuild_duration.Observe(
        static_cast<double>(MonotonicNanos() - start) * 1e-9);
  }
  return absl::OkStatus();
}

GroupRegistry::GroupRegistry(Metrics* metrics, uint64_t generation_base,
                             size_t max_groups)
    : metrics_(metrics),
      max_groups_(max_groups),
      generations_(generation_base),
      groups_(std::make_shared<const GroupMap>()) {
  // The key that signs sticky session tokens. Random per process unless the
  // state layer installs a persisted one.
  std::string key(32, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(key.data()),
             static_cast<int>(key.size()));
  session_key_ = std::make_shared<const std::string>(std::move(key));
}

GroupPtr GroupRegistry::Find(absl::string_view name) const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  auto it = map->find(name);
  return it == map->end() ? nullptr : it->second;
}

std::vector<GroupPtr> GroupRegistry::List() const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  std::vector<GroupPtr> out;
  out.reserve(map->size());
  for (const auto& [name, group] : *map) {
    out.push_back(group);
  }
  std::sort(out.begin(), out.end(), [](const GroupPtr& a, const GroupPtr& b) {
    return a->name() < b->name();
  });
  return out;
}

size_t GroupRegistry::size() const { return groups_.Acquire()->size(); }

absl::Status GroupRegistry::Add(GroupSpec spec) {
  absl::MutexLock lock(&write_mu_);
  std::shared_ptr<const GroupMap> current = groups_.Acquire();
  if (current->contains(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("group '", spec.name, "' already exists"));
  }
  if (current->size() >= max_groups_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "group limit reached (", max_groups_, " groups)"));
  }
  auto group = std::make_shared<Group>(std::move(spec), &generations_,
                                       metrics_, session_key_);
  ASIDE_RETURN_IF_ERROR(group->Init());
  auto next = std::make_shared<GroupMap>(*current);
  next->emplace(group->name(), group);
  groups_.Publish(std::move(next));
  return absl::OkStatus();
}

absl::Status GroupRegistry::Remove(absl::string_view name) {
  absl::MutexLock lock(&write_mu_);
  std::shared_ptr<const GroupMap> current = groups_.Acquire();
  if (!current->contains(name)) {
    return absl::NotFoundError(absl::StrCat("group '", name, "' not found"));
  }
  auto next = std::make_shared<GroupMap>(*current);
  next->erase(name);
  groups_.Publish(std::move(next));
  return absl::OkStatus();
}

}  // namespace aside::server
