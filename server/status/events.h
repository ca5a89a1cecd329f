// The status page's event timeline: what happened to the fleet and when,
// in a bounded ring the page shows beside its plots.
//
// - EventRecorder is the one interface the rest of the server records
//   through (the health observer, the config reloader, the publication
//   listener below, the history sampler for the store and the fleet). A
//   hook is one call; a null recorder records nothing.
// - EventLog keeps the last `capacity` events (default 1000) in a ring
//   allocated once: Record is O(1) (one short critical section, the slot's
//   strings reassigned, each cut to kMaxFieldBytes), List and Json are
//   O(capacity). The oldest event is overwritten when the ring is full and
//   counted in dropped().
// - PublicationEvents follows every group's publications (a listener of
//   every group, GroupRegistry::AddListener) and records, per
//   published generation, the generation itself and what changed for each
//   backend between the two tables: added, removed, drained, undrained,
//   ejected, returned. Health transitions are recorded by HealthEvents,
//   where the health registry reports them, not here, so they are not
//   doubled.
//
// - HealthEvents records each health flip, once per group holding the
//   target.
//
// Thread-safety: every method from any thread. EventLog has one mutex,
// taken alone; PublicationEvents has one, taken before EventLog's (its
// OnPublish runs on the group publisher's thread with no other lock held).
#ifndef ASIDE_SERVER_STATUS_EVENTS_H_
#define ASIDE_SERVER_STATUS_EVENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/groups/group_registry.h"
#include "server/health/health_registry.h"

namespace aside::server {

enum class EventKind : uint8_t {
  kHealth,        // a health target changed state (cause: from -> to, why)
  kEjected,       // outlier detection ejected a backend
  kReturned,      // an ejection ended
  kDrained,       // drained (the drain flag or weight 0)
  kUndrained,     // serving again after a drain
  kBackendAdded,  // a new member
  kBackendRemoved,
  kGeneration,  // a generation was published (cause: members, ready)
  kGroupAdded,
  kGroupRemoved,
  kConfigReloaded,
  kConfigReloadFailed,
  kStoreUp,
  kStoreDown,
  kMemberJoined,  // a fleet member appeared in the live set
  kMemberLeft,
};
// "health", "ejected", ..., as the JSON and the page name them.
absl::string_view EventKindName(EventKind kind);

struct Event {
  uint64_t seq = 0;  // 1, 2, ... in recording order
  absl::Time time;   // wall clock
  EventKind kind = EventKind::kGeneration;
  std::string group;    // empty when the event is not a group's
  std::string backend;  // empty when not a backend's (or a member id)
  std::string cause;
};

class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  // Records one event at the recorder's clock's now. Any thread; cheap
  // enough for a publication or a health transition (never a pick).
  virtual void Record(EventKind kind, absl::string_view group,
                      absl::string_view backend, absl::string_view cause) = 0;
};

class EventLog final : public EventRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 1000;
  static constexpr size_t kMaxFieldBytes = 256;

  explicit EventLog(const Clock* clock = &SystemClock::Get(),
                    size_t capacity = kDefaultCapacity);
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void Record(EventKind kind, absl::string_view group,
              absl::string_view backend, absl::string_view cause) override;

  // The kept events, oldest first; with a non-empty `group`, only that
  // group's and those of no group (config, store, fleet), which concern
  // every group.
  std::vector<Event> List(absl::string_view group = "") const;
  // {"capacity":N,"recorded":N,"dropped":N,"events":[{"seq","time",
  //  "time_unix_ms","kind","group","backend","cause"}...]}, filtered as List.
  std::string Json(absl::string_view group = "") const;

  size_t capacity() const { return capacity_; }
  uint64_t recorded() const;
  uint64_t dropped() const;

 private:
  const Clock* const clock_;
  const size_t capacity_;
  mutable aside::Mutex mu_;
  std::vector<Event> ring_ ABSL_GUARDED_BY(mu_);  // capacity_ slots
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

// Records each health flip of a target (HealthRegistry's observers, on the
// prober thread) as a `health` event of every group that holds it.
// Registers on construction; destruction detaches it and waits for a call
// in progress. Both must outlive it.
class HealthEvents {
 public:
  HealthEvents(HealthRegistry* health, EventRecorder* events);
  ~HealthEvents();
  HealthEvents(const HealthEvents&) = delete;
  HealthEvents& operator=(const HealthEvents&) = delete;

 private:
  HealthRegistry* const health_;
  uint64_t observer_ = 0;
};

class PublicationEvents final : public Group::Listener {
 public:
  // Follows the groups of `registry` (those already in it and every one
  // added later) until destroyed. Both must outlive this object.
  PublicationEvents(GroupRegistry* registry, EventRecorder* events);
  ~PublicationEvents() override;
  PublicationEvents(const PublicationEvents&) = delete;
  PublicationEvents& operator=(const PublicationEvents&) = delete;

  void OnAdded(Group& group, const TableConstPtr& table) override;
  // O(members): the new table against the previous one's summary.
  void OnPublish(Group& group, const TableConstPtr& table) override;
  void OnRemoved(Group& group, uint64_t generation) override;
  // Records every generation, held for the edges or not.
  bool every_publication() const override { return true; }

 private:
  // What the last table said about a backend, enough to see a change.
  struct BackendState {
    bool drained = false;
    bool ejected = false;
  };
  struct GroupState {
    // The group object these are of: a removal told late (publications
    // are told on the publisher's thread) must not drop the state of a
    // group of the same name added since.
    const Group* group = nullptr;
    uint64_t generation = 0;
    absl::flat_hash_map<std::string, BackendState> backends;
  };
  // Takes `table` as what the group's backends were, unless a
  // publication got here first (or `replace`: the group is new).
  void Seed(Group& group, const TableConstPtr& table, bool replace);

  GroupRegistry* const registry_;
  EventRecorder* const events_;
  aside::Mutex mu_;
  absl::flat_hash_map<std::string, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STATUS_EVENTS_H_
