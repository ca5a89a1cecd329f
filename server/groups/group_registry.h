// All groups by name (GroupRegistry): lock-free lookups for every edge,
// serialised additions and removals, the namespace of names and aliases,
// and the listeners of every group. One group is group.h.
#ifndef ASIDE_SERVER_GROUPS_GROUP_REGISTRY_H_
#define ASIDE_SERVER_GROUPS_GROUP_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/snapshot_cell.h"
#include "lib/sync.h"
#include "server/base/group_metrics.h"
#include "server/base/metrics.h"
#include "server/groups/generation_source.h"
#include "server/groups/group.h"
#include "server/groups/group_map.h"
#include "server/load/load_aggregator.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// All groups by name. Find() is lock-free (the map is an immutable snapshot
// replaced on add and remove).
//
// Thread rules: Find, List, size from any thread (lock-free); Add and Remove
// from any thread, serialised on write_mu_ (which guards metrics_by_name_);
// set_inputs and set_session_key during start-up only, before groups are
// added. AddListener and RemoveListener from any thread but a listener's
// call (EveryGroupListeners).
class GroupRegistry {
 public:
  // `generation_base`: generations start above it. The server passes the
  // start time in microseconds since the epoch (or the persisted generation,
  // if higher) so generations never go backwards across restarts. Fails
  // when no random bytes can be drawn for the session key or server id.
  static absl::StatusOr<std::unique_ptr<GroupRegistry>> Create(
      Metrics* metrics, uint64_t generation_base, size_t max_groups,
      GenerationSource::Reserver reserver = nullptr);

  // Installs DNS discovery and the rebuild scheduler (before groups are
  // added).
  void set_inputs(GroupInputs inputs) {
    inputs_ = inputs;
    inputs_.every_group = &every_group_;
  }

  GroupPtr Find(absl::string_view name) const;
  // Sorted by name.
  std::vector<GroupPtr> List() const;
  size_t size() const;

  // The load aggregator's questions and news (its Membership and
  // Listener): whether `group` has `address` in its table, and an accepted
  // observation, handed to its group (Group::OnLoadReport).
  bool Serves(const std::string& group, const std::string& address) const;
  void OnLoadAccepted(const LoadAggregator::Accepted& a);

  // Adds a validated group, persists it (if `persist` is given) and
  // publishes its first table. ALREADY_EXISTS, RESOURCE_EXHAUSTED (max
  // groups) or the table build error; on error nothing changes.
  // Names and aliases are one namespace (see CheckGroupNamespace): a name
  // or alias that would take another group's grpclb clients is refused with
  // ALREADY_EXISTS naming the owner, checked under the same lock as the
  // change itself. With `first_generation` (a store revision's generation)
  // the group counts its own generations from there
  // (Group::UseOwnGenerations).
  absl::Status Add(GroupSpec spec, uint64_t first_generation = 0);
  // Updates `group` (which must still be registered) to `spec` through
  // Group::Update (with `min_generation`, see there), after the same
  // namespace check. Changes that may touch aliases go through here, never
  // through Group::Update directly.
  absl::Status Update(const GroupPtr& group, GroupSpec spec,
                      uint64_t min_generation = 0);
  // The namespace check alone, for a write that must be refused before it
  // reaches a shared store (Add and Update check again under their lock).
  absl::Status CheckNamespace(const GroupSpec& spec) const;
  // Removes a group; its listeners hear OnRemoved, with `generation` when
  // given (a store revision's), else a new one of the registry's. Returns
  // the removal's generation.
  absl::StatusOr<uint64_t> Remove(absl::string_view name,
                                  uint64_t generation = 0);

  // A listener of every group, those here now and those added later: told
  // as each group's own listeners are (Group::Listener, no lock held),
  // OnAdded with a group's first table once Find returns it. It may call
  // Add, Find and the groups' methods, but not (un)register listeners of
  // every group. RemoveListener waits for a call in progress to return,
  // after which the listener may be destroyed.
  void AddListener(Group::Listener* listener) { every_group_.Add(listener); }
  void RemoveListener(Group::Listener* listener) {
    every_group_.Remove(listener);
  }

  GenerationSource& generations() { return generations_; }
  // Random per process; tells Watch subscribers which server's generation
  // space an update belongs to.
  const std::string& server_id() const { return server_id_; }
  const std::shared_ptr<const std::string>& session_key() const {
    return session_key_;
  }
  // Installs the key that signs sticky session tokens (before groups are
  // added).
  void set_session_key(std::string key);

 private:
  using GroupMap = ShardedMap<GroupPtr>;

  GroupRegistry(Metrics* metrics, uint64_t generation_base, size_t max_groups,
                GenerationSource::Reserver reserver, std::string session_key,
                std::string server_id);

  // First: the groups tell it until they go.
  EveryGroupListeners every_group_;
  Metrics* const metrics_;
  const size_t max_groups_;
  GenerationSource generations_;
  std::shared_ptr<const std::string> session_key_;
  std::string server_id_;
  GroupInputs inputs_;
  std::shared_ptr<GroupMetrics> MetricsFor(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // The namespace check of `spec` against every other group of `map`.
  absl::Status CheckNamespaceLocked(const GroupSpec& spec,
                                    const GroupMap& map) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void SetAliasesLocked(const std::string& group,
                        const std::vector<std::string>& aliases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  SnapshotCell<GroupMap> groups_;
  mutable aside::Mutex write_mu_;  // serialises Add/Remove
  absl::flat_hash_map<std::string, std::weak_ptr<GroupMetrics>> metrics_by_name_
      ABSL_GUARDED_BY(write_mu_);
  // metrics_by_name_ is swept of expired entries when it reaches this size
  // (then set to twice what is left), so that adding G groups costs O(G).
  size_t metrics_sweep_at_ ABSL_GUARDED_BY(write_mu_) = 64;
  // Every alias of every group, with its group's name.
  absl::flat_hash_map<std::string, std::string> alias_owners_
      ABSL_GUARDED_BY(write_mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_REGISTRY_H_
