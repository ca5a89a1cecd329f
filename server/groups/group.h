// One group at run time: it turns its declared spec (plus health and load,
// as later layers supply them) into an immutable Table and publishes it;
// picks read the published table without locks. GroupRegistry
// (group_registry.h) holds the groups by name.
//
// A build has three parts, each in its own file: the side state a group
// keeps about its members (group_member_state.h: health handles, outlier
// ejections, slow-start and zone timers) is synced first; the table's
// contents follow from it (group_table_builder.h, pure); and the Group here
// decides whether anything changed and, only then, takes a generation and
// publishes. Its listeners (the protocol edges, the event log) hear of
// publications from the group publisher (group_publisher.h).
#ifndef ASIDE_SERVER_GROUPS_GROUP_H_
#define ASIDE_SERVER_GROUPS_GROUP_H_

#include <atomic>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/load/load_tracker.h"
#include "lib/snapshot_cell.h"
#include "lib/sync.h"
#include "lib/table.h"
#include "server/base/group_metrics.h"
#include "server/base/metrics.h"
#include "server/groups/generation_source.h"
#include "server/groups/group_member_state.h"
#include "server/groups/published_forms.h"
#include "server/groups/table_encoding.h"
#include "server/health/health_registry.h"
#include "server/health/outlier_detector.h"
#include "server/load/load_aggregator.h"
#include "server/schema/group_spec.h"

namespace aside::server {

class DnsDiscovery;
class EveryGroupListeners;
class GroupPublisher;
class HealthRegistry;
class LoadAggregator;
class OrcaCollector;
class RebuildScheduler;

// What groups use to follow inputs that change on their own: DNS answers,
// probe results, passive health from load reports, slow-start ramps. Any may
// be null (no probing: every member healthy).
struct GroupInputs {
  DnsDiscovery* dns = nullptr;
  RebuildScheduler* scheduler = nullptr;
  HealthRegistry* health = nullptr;
  // Utilisation for the locality policy's zone weights.
  const LoadAggregator* loads = nullptr;
  // Backends' own load reports (groups with an `orca:` block).
  OrcaCollector* orca = nullptr;
  const Clock* clock = &SystemClock::Get();
  // `publication.window`: the edges (listeners that are not
  // every_publication) hear of a group's publications at most once per
  // window; those within it reach them as one, the newest, at its end. The
  // first after a quiet window goes out at once. Needs `scheduler`; zero
  // tells every publication at once.
  absl::Duration publish_window = absl::ZeroDuration();
  // Tells listeners of publications on a thread of its own (the server's).
  // Without one (tests), the publishing thread tells them once it has
  // released the group's and the registry's locks.
  GroupPublisher* publisher = nullptr;
  // The listeners of every group of the registry (set by the registry).
  EveryGroupListeners* every_group = nullptr;
};

// One group. Thread rules:
// - table(), spec(), spec_snapshot(): any thread, lock-free, once Init
//   succeeded.
// - Init, Update, Rebuild: any thread (Admin handlers, the config loader,
//   the RebuildScheduler's thread, DNS callbacks without a scheduler);
//   they serialise on mu_, which guards spec_, the DNS watch id and the
//   member side state (members_, except its outlier detector).
// - OnLoadReport, Ejections: any thread; they touch only the table (read
//   lock-free) and the outlier detector (its own lock), never mu_.
// - OnDnsResult: DNS threads; dns_mu_ guards the discovered members.
// - Listeners: notify_mu_ (after mu_, or alone) guards them and the
//   notices they have yet to hear; it is never held while one is told.
//   The rebuild count too.
// - published(), Encoded(): any thread, lock-free: each publication
//   carries the tables before it and makes its Watch encoding once, on
//   first use; the edges' forms in it are built under its own lock
//   (PublishedForms), which takes nothing.
class Group : public std::enable_shared_from_this<Group> {
 public:
  // Told about publications (Watch, grpclb and ADS streams; the event
  // log). Called with no lock held: on the publisher's thread
  // (GroupInputs::publisher), or without one on the publishing thread once
  // it has released the group's and the registry's locks. One call at a
  // time per group, in publication order. A listener may call any of the
  // group's methods, RemoveListener(this) included; it should only note
  // the change and start non-blocking work (the other groups' listeners
  // wait behind it).
  class Listener {
   public:
    virtual ~Listener() = default;
    // `table` is the publication told of: each in turn for listeners of
    // every_publication, the newest when told for the others.
    virtual void OnPublish(Group& group, const TableConstPtr& table) = 0;
    // The group's first publication, told only to the listeners of every
    // group (EveryGroupListeners; a group's own listeners join later): the
    // group is in the registry now (Find returns it). An OnPublish unless
    // overridden.
    virtual void OnAdded(Group& group, const TableConstPtr& table) {
      OnPublish(group, table);
    }
    // The group was deleted; `generation` is the deletion's. Nothing
    // follows it.
    virtual void OnRemoved(Group& group, uint64_t generation) = 0;
    // True: told of every publication (a record of them). False (the
    // protocol edges): told at most once per publish window
    // (GroupInputs::publish_window), the table then current.
    virtual bool every_publication() const { return false; }
  };

  // One publication: everything an edge serves from, in one snapshot. The
  // Watch encoding is made once, by the first edge that asks (Encoded());
  // grpclb lists and xDS resources are built once into `forms`, those that
  // follow from the spec alone into `spec_forms`, which a publication that
  // keeps the spec carries over.
  struct Publication {
    TableConstPtr table;
    std::shared_ptr<const GroupSpec> spec;  // the spec that made `table`
    std::vector<TableConstPtr> bases;       // the tables before it
    mutable PublishedForms forms;
    std::shared_ptr<PublishedForms> spec_forms;
    mutable std::once_flag encode_once;
    mutable std::shared_ptr<const EncodedUpdate> encoded;
  };

  Group(GroupSpec spec, GenerationSource* generations, Metrics* metrics,
        std::shared_ptr<GroupMetrics> group_metrics,
        std::shared_ptr<const std::string> session_key,
        std::string server_id = "", GroupInputs inputs = {});
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  const std::string& server_id() const { return server_id_; }
  // The current table; never null after Init() succeeded.
  TableConstPtr table() const { return table_.Acquire(); }
  // The newest publication; never null after Init() succeeded. Lock-free.
  // An edge reads the table and the spec from one publication, so they
  // always belong together.
  std::shared_ptr<const Publication> published() const {
    return publication_.Acquire();
  }
  // The spec of the newest publication; lock-free (safe from listener
  // callbacks).
  GroupSpec spec() const;
  std::shared_ptr<const GroupSpec> spec_snapshot() const;
  // Never null when the registry was given Metrics.
  const GroupMetrics* metrics() const { return group_metrics_.get(); }

  // Builds the first table and publishes it.
  absl::Status Init();
  // Gives the group a generation counter of its own, starting at
  // `first` (a store revision's generation; see store.h), instead of the
  // registry's. Before Init only.
  void UseOwnGenerations(uint64_t first);
  // Builds a table from `spec`, publishes it and keeps the spec. An update
  // is an acknowledged mutation: it always takes a new generation, newer
  // than any before, even when nothing visible changed. On a build error
  // the table and spec stay as they were. With `min_generation` (a store
  // revision's generation) the new table's generation is at least that.
  absl::Status Update(GroupSpec spec, uint64_t min_generation = 0);
  // Rebuilds the table from the current spec and inputs (health, load) and,
  // only if anything a pick or a subscriber sees changed, publishes it with
  // a new generation (a no-op rebuild takes no generation). Called off the
  // request path; concurrent calls are serialised.
  void Rebuild();
  // Rebuild() calls completed so far, whether they published or not, and a
  // bounded wait for their count to reach `count` (an event to wait on
  // instead of sleeping while timers run). True when it did.
  uint64_t rebuilds() const;
  bool AwaitRebuilds(uint64_t count, absl::Duration timeout) const;

  // A listener added hears of publications from the next one told; once
  // RemoveListener returns it is never called again (a call in progress on
  // another thread is waited for).
  void AddListener(Listener* listener);
  void RemoveListener(Listener* listener);
  // Tells the listeners, in order, what the group's publications queued
  // for them; returns at once when another thread is telling them (it
  // tells these too). The publisher's thread calls it; without a
  // publisher, the group does after each change.
  void TellListeners();

  // The newest publication in Watch's wire form: encoded once per
  // generation (its full form on first use) and shared by all subscribers.
  // Lock-free.
  std::shared_ptr<const EncodedUpdate> Encoded() const;

  // Starts following the spec's DNS name (if any). Called once the group is
  // published; StopDiscovery() before it is dropped.
  void StartDiscovery();
  void StopDiscovery();
  // A DNS answer (or failure) for this group: new members are taken in a
  // coalesced rebuild; a failure keeps the last members and is reported.
  void OnDnsResult(const absl::StatusOr<std::vector<Backend>>& members);
  // The last DNS failure ("" when the last resolution succeeded).
  std::string dns_error() const;

  // Passive health from load reports (ReportLoad, grpclb): new requests and
  // failures of one backend since the reporter's last report, and the
  // failures in a row it sees now. Ejections take effect in a rebuild.
  // The mean latencies of those requests also feed the server's load models
  // (peak-EWMA, least-time), so server-side picks see the fleet's view.
  // `failures_corroborated` false (reporters holding most of the weight see
  // no failures in a row; LoadAggregator) keeps the batch away from outlier
  // detection.
  void OnLoadReport(const std::string& address, uint64_t requests,
                    uint64_t failures, uint32_t consecutive_failures,
                    absl::Duration mean_latency,
                    absl::Duration mean_first_byte_latency,
                    bool failures_corroborated = true);
  // Current outlier ejections of this group's backends.
  std::vector<OutlierDetector::Ejection> Ejections() const;

 private:
  // Syncs the member side state with `spec` and the discovered members,
  // schedules the next timed rebuild, and returns what the table would be
  // (without a generation).
  TableSpec PrepareLocked(const GroupSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a new generation and builds the table.
  absl::StatusOr<TableConstPtr> CreateTableLocked(TableSpec next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  friend class GroupRegistry;
  // Update without telling the listeners, and the removal queued for them:
  // the registry tells them (Announce) once its own lock is released.
  absl::Status UpdateQuietly(GroupSpec spec, uint64_t min_generation);
  void QueueRemoved(uint64_t generation);
  // Has the listeners told what is queued: posts the group to the
  // publisher, or tells them here. Call with no lock held.
  void Announce();

  void RebuildLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked(TableConstPtr table, int64_t build_start_nanos)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a publication for the listeners, or holds it for the edges until
  // the publish window ends. `first`: the group's first (OnAdded).
  void NotifyPublishLocked(const TableConstPtr& table, bool first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether anyone listens: the group's own listeners or those of every
  // group.
  bool HasListenersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(notify_mu_);
  // At the end of the window (a scheduled Rebuild): queues the publication
  // held, if any, for the edges.
  void FlushHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Schedules the next rebuild a slow-start ramp, an ejection expiry or a
  // zone weight update needs.
  void ScheduleTimedRebuildLocked(const GroupSpec& spec, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchDnsLocked(const GroupSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnwatchDnsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  // The registry's, or own_generations_ (set before Init, then fixed).
  GenerationSource* generations_;
  std::unique_ptr<GenerationSource> own_generations_;
  Metrics* const metrics_;
  const std::shared_ptr<const std::string> session_key_;
  const std::string server_id_;
  const std::shared_ptr<GroupMetrics> group_metrics_;
  LoadTracker loads_;
  // The newest publication's table again, on its own: a pick loads it in
  // one step and holds the table alone.
  SnapshotCell<Table> table_;

  const GroupInputs inputs_;
  mutable aside::Mutex mu_;
  // The spec the group builds from (published with each table).
  std::shared_ptr<const GroupSpec> spec_ ABSL_GUARDED_BY(mu_);
  uint64_t dns_watch_ ABSL_GUARDED_BY(mu_) = 0;
  // Health handles, join times, zone smoothing: guarded by mu_; its
  // outlier detector locks itself (see GroupMemberState).
  GroupMemberState members_;

  // Written by DNS callbacks, read by table builds. Taken alone or after
  // mu_, never before it: DNS callbacks take it while an Unwatch (under mu_)
  // waits for them.
  mutable aside::Mutex dns_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<Backend> dns_members_ ABSL_GUARDED_BY(dns_mu_);
  std::string dns_error_ ABSL_GUARDED_BY(dns_mu_);

  // What the listeners have yet to hear: a publication (for the records,
  // and for the edges unless held by the window) or the removal.
  struct Notice {
    TableConstPtr table;  // null: the group was removed
    bool added = false;   // the first publication
    bool records = false;
    bool edges = false;
    uint64_t removed_generation = 0;
  };
  // Tells `l` of `n` (unless held from it by the publish window).
  void Tell(Listener& l, const Notice& n);
  mutable aside::Mutex notify_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<Listener*> listeners_ ABSL_GUARDED_BY(notify_mu_);
  std::vector<Notice> notices_ ABSL_GUARDED_BY(notify_mu_);
  // Rebuild() calls completed (AwaitRebuilds waits on it).
  uint64_t rebuilds_ ABSL_GUARDED_BY(notify_mu_) = 0;
  // The removal was queued: nothing more is.
  bool removed_ ABSL_GUARDED_BY(notify_mu_) = false;
  // Posted to the publisher and not yet taken up.
  bool posted_ ABSL_GUARDED_BY(notify_mu_) = false;
  // A thread is telling the listeners (which, and its rounds: one per batch
  // of notices). RemoveListener on another thread waits for the round in
  // progress; on the teller's, it marks the listener gone for the rest of
  // the round.
  bool telling_ ABSL_GUARDED_BY(notify_mu_) = false;
  std::thread::id teller_ ABSL_GUARDED_BY(notify_mu_);
  uint64_t rounds_started_ ABSL_GUARDED_BY(notify_mu_) = 0;
  uint64_t rounds_done_ ABSL_GUARDED_BY(notify_mu_) = 0;
  // Listeners removed during the round in progress: touched only by the
  // telling thread (teller_).
  std::vector<Listener*> gone_in_round_;
  // When the edges were last told (clock nanoseconds), and whether a
  // publication since waits for the window's end.
  int64_t notified_at_ ABSL_GUARDED_BY(notify_mu_) =
      std::numeric_limits<int64_t>::min() / 2;
  bool held_ ABSL_GUARDED_BY(notify_mu_) = false;

  // The tables published before the current one, oldest first (the last is
  // the base of its delta; all are bases of combined deltas, at most
  // kDeltaBases).
  std::deque<TableConstPtr> recent_tables_ ABSL_GUARDED_BY(mu_);
  // Swapped as one with the table (PublishLocked), read without a lock.
  SnapshotCell<Publication> publication_;
};

using GroupPtr = std::shared_ptr<Group>;

// The listeners of every group of a registry (GroupRegistry::AddListener):
// each group tells them what it tells its own listeners, right after them,
// from its first publication (OnAdded) to its removal, whether or not
// anything else listens to it. One list, so that an edge that follows all
// groups neither keeps a subscription per group nor misses the ones added
// later. A group's RemoveListener does not wait for these calls, so a lock
// that a listener of every group takes may be held while leaving a group
// (the Watch hub's is).
//
// Thread rules: Add and Remove from any thread, never from a listener
// call: Remove waits for the rounds in progress (of any group), so a
// listener removed is never called again. mu_ is taken alone and never
// held while a listener is told.
class EveryGroupListeners {
 public:
  // Hears of publications queued from now on.
  void Add(Group::Listener* listener);
  void Remove(Group::Listener* listener);
  // Lock-free: whether a publication needs queueing for these.
  bool empty() const { return size_.load(std::memory_order_acquire) == 0; }

  // A group's round of telling: the listeners now, counted in progress
  // until EndRound.
  std::vector<Group::Listener*> BeginRound();
  void EndRound();

 private:
  aside::Mutex mu_;
  std::vector<Group::Listener*> listeners_ ABSL_GUARDED_BY(mu_);
  int rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> size_{0};
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_H_
