// Groups at run time: each group turns its declared spec (plus health and
// load, as later layers supply them) into an immutable Table and publishes
// it; picks read the published table without locks.
#ifndef ASIDE_SERVER_GROUP_REGISTRY_H_
#define ASIDE_SERVER_GROUP_REGISTRY_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lib/clock.h"
#include "lib/load/load_tracker.h"
#include "lib/snapshot_cell.h"
#include "lib/table.h"
#include "server/group_spec.h"
#include "server/metrics.h"

namespace aside::server {

// Hands out table generations: strictly increasing across all groups of
// the process, starting above `base` (see GroupRegistry).
class GenerationSource {
 public:
  explicit GenerationSource(uint64_t base) : last_(base) {}
  uint64_t Next() { return last_.fetch_add(1, std::memory_order_relaxed) + 1; }
  uint64_t last() const { return last_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> last_;
};

// Per-group Prometheus children, resolved once so the pick path does no
// label lookups.
struct GroupMetrics {
  prometheus::Counter* picks_ok = nullptr;
  prometheus::Counter* picks_unavailable = nullptr;
  prometheus::Counter* picks_invalid = nullptr;
  prometheus::Gauge* ready = nullptr;
  prometheus::Gauge* total = nullptr;
  prometheus::Gauge* panic = nullptr;
  prometheus::Gauge* generation = nullptr;
  prometheus::Counter* rebuilds = nullptr;
};

// One group. Thread-safe: table() from any thread without locks; mutations
// serialise on the group's mutex and publish a new table.
class Group {
 public:
  Group(GroupSpec spec, GenerationSource* generations, Metrics* metrics,
        std::shared_ptr<const std::string> session_key);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  // The current table; never null after Init() succeeded.
  TableConstPtr table() const { return table_.Acquire(); }
  GroupSpec spec() const;
  const GroupMetrics& metrics() const { return group_metrics_; }

  // Builds and publishes the first table.
  absl::Status Init();
  // Replaces the spec and publishes a new table; on error nothing changes.
  absl::Status Update(GroupSpec spec);

 private:
  absl::Status PublishLocked(const GroupSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  GenerationSource* const generations_;
  Metrics* const metrics_;
  const std::shared_ptr<const std::string> session_key_;
  GroupMetrics group_metrics_;
  LoadTracker loads_;
  SnapshotCell<Table> table_;

  mutable absl::Mutex mu_;
  GroupSpec spec_ ABSL_GUARDED_BY(mu_);
};

using GroupPtr = std::shared_ptr<Group>;

// All groups by name. Find() is lock-free (the map is an immutable snapshot
// replaced on add and remove).
class GroupRegistry {
 public:
  // `generation_base`: generations start above it. The server passes the
  // start time in microseconds since the epoch (or the persisted generation,
  // if higher) so generations never go backwards across restarts.
  GroupRegistry(Metrics* metrics, uint64_t generation_base, size_t max_groups);

  GroupPtr Find(absl::string_view name) const;
  // Sorted by name.
  std::vector<GroupPtr> List() const;
  size_t size() const;

  // Adds a validated group and publishes its first table. ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED (max groups) or the table build error.
  absl::Status Add(GroupSpec spec);
  absl::Status Remove(absl::string_view name);

  GenerationSource& generations() { return generations_; }
  const std::shared_ptr<const std::string>& session_key() const {
    return session_key_;
  }

 private:
  using GroupMap = absl::flat_hash_map<std::string, GroupPtr>;

  Metrics* const metrics_;
  const size_t max_groups_;
  GenerationSource generations_;
  std::shared_ptr<const std::string> session_key_;
  SnapshotCell<GroupMap> groups_;
  absl::Mutex write_mu_;  // serialises Add/Remove
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUP_REGISTRY_H_
