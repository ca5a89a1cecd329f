#include "server/groups/group_registry.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"

namespace aside::server {

namespace {

// Fills `out` from OpenSSL's CSPRNG; an error names what the bytes were for.
absl::Status RandomBytes(absl::Span<unsigned char> out,
                         absl::string_view what) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    char reason[256] = "unknown error";
    if (const unsigned long code = ERR_get_error(); code != 0) {
      ERR_error_string_n(code, reason, sizeof(reason));
    }
    return absl::InternalError(
        absl::StrCat("cannot draw random bytes for the ", what, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GroupRegistry>> GroupRegistry::Create(
    Metrics* metrics, uint64_t generation_base, size_t max_groups,
    GenerationSource::Reserver reserver) {
  // The key that signs sticky session tokens: random per process unless the
  // state layer installs a persisted one. Never a weak key: without random
  // bytes the server does not start.
  std::string key(32, '\0');
  ASIDE_RETURN_IF_ERROR(RandomBytes(
      absl::MakeSpan(reinterpret_cast<unsigned char*>(key.data()), key.size()),
      "session key"));
  unsigned char id[12];
  ASIDE_RETURN_IF_ERROR(RandomBytes(absl::MakeSpan(id), "server id"));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string server_id;
  for (unsigned char c : id) {
    server_id.push_back(kHex[c >> 4]);
    server_id.push_back(kHex[c & 15]);
  }
  return std::unique_ptr<GroupRegistry>(new GroupRegistry(
      metrics, generation_base, max_groups, std::move(reserver), std::move(key),
      std::move(server_id)));
}

GroupRegistry::GroupRegistry(Metrics* metrics, uint64_t generation_base,
                             size_t max_groups,
                             GenerationSource::Reserver reserver,
                             std::string session_key, std::string server_id)
    : metrics_(metrics),
      max_groups_(max_groups),
      generations_(generation_base, std::move(reserver)),
      session_key_(std::make_shared<const std::string>(std::move(session_key))),
      server_id_(std::move(server_id)),
      groups_(std::make_shared<const GroupMap>()) {
  inputs_.every_group = &every_group_;
}

GroupPtr GroupRegistry::Find(absl::string_view name) const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  const GroupPtr* group = map->find(name);
  return group == nullptr ? nullptr : *group;
}

bool GroupRegistry::Serves(const std::string& group,
                           const std::string& address) const {
  GroupPtr g = Find(group);
  return g != nullptr && g->table()->Find(address) >= 0;
}

void GroupRegistry::OnLoadAccepted(const LoadAggregator::Accepted& a) {
  if (GroupPtr g = Find(a.group)) {
    g->OnLoadReport(a.address, a.new_requests, a.new_failures,
                    a.consecutive_failures, a.mean_latency,
                    a.mean_first_byte_latency, a.failures_corroborated);
  }
}

std::vector<GroupPtr> GroupRegistry::List() const {
  std::shared_ptr<const GroupMap> map = groups_.Acquire();
  // Sorted on the map's own keys: comparing through the groups would visit
  // every group object O(log G) times.
  std::vector<std::pair<absl::string_view, const GroupPtr*>> named;
  named.reserve(map->size());
  map->ForEach([&](const std::string& name, const GroupPtr& group) {
    named.emplace_back(name, &group);
  });
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GroupPtr> out;
  out.reserve(named.size());
  for (const auto& [name, group] : named) {
    out.push_back(*group);
  }
  return out;
}

size_t GroupRegistry::size() const { return groups_.Acquire()->size(); }

std::shared_ptr<GroupMetrics> GroupRegistry::MetricsFor(
    const std::string& name) {
  if (metrics_ == nullptr) {
    return nullptr;
  }
  std::weak_ptr<GroupMetrics>& slot = metrics_by_name_[name];
  std::shared_ptr<GroupMetrics> existing = slot.lock();
  if (existing == nullptr) {
    existing = std::make_shared<GroupMetrics>(&metrics_->group_series(), name);
    slot = existing;
  }
  // Forget names whose metrics are gone, once the map has doubled since
  // the last sweep: a sweep on every add made starting with G groups cost
  // O(G^2).
  if (metrics_by_name_.size() >= metrics_sweep_at_) {
    absl::erase_if(metrics_by_name_,
                   [](const auto& entry) { return entry.second.expired(); });
    metrics_sweep_at_ = std::max<size_t>(64, 2 * metrics_by_name_.size());
  }
  return existing;
}

void GroupRegistry::set_session_key(std::string key) {
  session_key_ = std::make_shared<const std::string>(std::move(key));
}

absl::Status GroupRegistry::Add(GroupSpec spec, uint64_t first_generation) {
  GroupPtr group;
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    if (current->contains(spec.name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("group '", spec.name, "' already exists"));
    }
    ASIDE_RETURN_IF_ERROR(CheckNamespaceLocked(spec, *current));
    if (current->size() >= max_groups_) {
      if (metrics_ != nullptr) {
        metrics_->limit_refused.Add({{"limit", "max_groups"}}).Increment();
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "limits.max_groups: group limit reached (", max_groups_, " groups)"));
    }
    std::shared_ptr<GroupMetrics> group_metrics = MetricsFor(spec.name);
    group = std::make_shared<Group>(std::move(spec), &generations_, metrics_,
                                    std::move(group_metrics), session_key_,
                                    server_id_, inputs_);
    if (first_generation > 0) {
      group->UseOwnGenerations(first_generation);
    }
    ASIDE_RETURN_IF_ERROR(group->Init());
    groups_.Publish(current->With(group->name(), group));
    SetAliasesLocked(group->name(), group->spec_snapshot()->aliases);
    group->StartDiscovery();
  }
  // A probe result that arrived between the first build and now found no
  // group to rebuild (health observers look groups up by name): take it in
  // now. Usually nothing changed and this publishes nothing. Outside
  // write_mu_, as it tells the listeners (the first publication's OnAdded
  // among them).
  group->Rebuild();
  return absl::OkStatus();
}

absl::Status GroupRegistry::Update(const GroupPtr& group, GroupSpec spec,
                                   uint64_t min_generation) {
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    const GroupPtr* found = current->find(group->name());
    if (found == nullptr || *found != group || spec.name != group->name()) {
      return absl::NotFoundError(
          absl::StrCat("group '", group->name(), "' not found"));
    }
    ASIDE_RETURN_IF_ERROR(CheckNamespaceLocked(spec, *current));
    std::vector<std::string> aliases = spec.aliases;
    ASIDE_RETURN_IF_ERROR(
        group->UpdateQuietly(std::move(spec), min_generation));
    SetAliasesLocked(group->name(), aliases);
  }
  group->Announce();  // the listeners, with write_mu_ released
  return absl::OkStatus();
}

absl::Status GroupRegistry::CheckNamespace(const GroupSpec& spec) const {
  aside::MutexLock lock(&write_mu_);
  return CheckNamespaceLocked(spec, *groups_.Acquire());
}

absl::Status GroupRegistry::CheckNamespaceLocked(const GroupSpec& spec,
                                                 const GroupMap& map) const {
  // The groups that could collide: the owners of any alias (a name or an
  // alias of `spec` may overlap theirs), and the groups an alias of `spec`
  // names outright or by its first label. Sorted, for a stable answer.
  std::set<std::string> candidates;
  for (const auto& [alias, owner] : alias_owners_) {
    candidates.insert(owner);
  }
  for (const std::string& alias : spec.aliases) {
    const std::string folded = FoldDialedName(alias);
    candidates.insert(std::string(GrpclbLabel(folded)));
    candidates.insert(folded);
  }
  candidates.erase(spec.name);
  for (const std::string& name : candidates) {
    if (const GroupPtr* other = map.find(name); other != nullptr) {
      ASIDE_RETURN_IF_ERROR(
          CheckGroupNamespace(spec, *(*other)->spec_snapshot()));
    }
  }
  return absl::OkStatus();
}

void GroupRegistry::SetAliasesLocked(const std::string& group,
                                     const std::vector<std::string>& aliases) {
  absl::erase_if(alias_owners_,
                 [&](const auto& entry) { return entry.second == group; });
  for (const std::string& alias : aliases) {
    alias_owners_.emplace(alias, group);
  }
}

absl::StatusOr<uint64_t> GroupRegistry::Remove(absl::string_view name,
                                               uint64_t removal_generation) {
  GroupPtr removed;
  uint64_t generation = 0;
  {
    aside::MutexLock lock(&write_mu_);
    std::shared_ptr<const GroupMap> current = groups_.Acquire();
    if (!current->contains(name)) {
      return absl::NotFoundError(
          absl::StrCat("group '", EchoName(name), "' not found"));
    }
    generation =
        removal_generation > 0 ? removal_generation : generations_.Next();
    removed = *current->find(name);
    removed->StopDiscovery();
    groups_.Publish(current->Without(name));
    SetAliasesLocked(removed->name(), {});
    removed->QueueRemoved(generation);
  }
  removed->Announce();  // the listeners, with write_mu_ released
  return generation;
}

}  // namespace aside::server