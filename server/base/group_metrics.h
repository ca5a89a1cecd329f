// The per-group Prometheus series (picks, backends, panic, generation,
// rebuilds, Watch subscribers and updates), kept outside prometheus-cpp's
// families: a family finds the child to remove by a linear scan of all its
// children, so removing one group among G cost O(G) per series. Here each
// group owns its series, registers them once in GroupSeries (a hash set),
// and GroupSeries renders every group's series at scrape time: adding and
// removing a group are O(1) in the number of groups.
#ifndef ASIDE_SERVER_BASE_GROUP_METRICS_H_
#define ASIDE_SERVER_BASE_GROUP_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "lib/sync.h"

namespace aside::server {

struct GroupMetrics;

// Every live GroupMetrics, rendered as the families aside_picks_total,
// aside_group_backends, aside_group_panic, aside_table_generation,
// aside_table_rebuilds_total, aside_watch_subscribers and
// aside_watch_updates_total, with the series of each family ordered by their
// labels as prometheus-cpp orders a family's children. A family with no
// series is left out, as prometheus-cpp leaves out an empty family.
class GroupSeries : public prometheus::Collectable {
 public:
  GroupSeries() = default;
  GroupSeries(const GroupSeries&) = delete;
  GroupSeries& operator=(const GroupSeries&) = delete;

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Collect's families, each with the name of the family it follows in the
  // server's exposition (the order in which the families were once
  // registered with the other server metrics), empty ones included.
  struct Anchored {
    std::string after;
    prometheus::MetricFamily family;
  };
  std::vector<Anchored> CollectAnchored() const;

 private:
  friend struct GroupMetrics;
  void Insert(const GroupMetrics* group);
  void Erase(const GroupMetrics* group);

  mutable aside::Mutex mu_;
  absl::flat_hash_set<const GroupMetrics*> groups_ ABSL_GUARDED_BY(mu_);
};

// One group's series, resolved once so the pick path does no label lookups.
// Shared by every Group object of one name (a deleted group may still serve
// in-flight picks while a new one of the same name starts); the series go
// away with the last holder. The pointers below point into this object.
struct GroupMetrics {
  GroupMetrics(GroupSeries* series, std::string group);
  ~GroupMetrics();
  GroupMetrics(const GroupMetrics&) = delete;
  GroupMetrics& operator=(const GroupMetrics&) = delete;

  GroupSeries* const series;
  const std::string group;

 private:
  friend class GroupSeries;
  enum CounterIndex {
    kPicksOk,
    kPicksUnavailable,
    kPicksInvalid,
    kRebuilds,
    kWatchFull,
    kWatchDelta,
    kWatchUnchanged,
    kWatchRemoved,
    kCounters
  };
  enum GaugeIndex {
    kReady,
    kTotal,
    kPanic,
    kGeneration,
    kWatchSubscribers,
    kGauges
  };
  prometheus::Counter counters_[kCounters];
  prometheus::Gauge gauges_[kGauges];

 public:
  prometheus::Counter* const picks_ok = &counters_[kPicksOk];
  prometheus::Counter* const picks_unavailable = &counters_[kPicksUnavailable];
  prometheus::Counter* const picks_invalid = &counters_[kPicksInvalid];
  prometheus::Gauge* const ready = &gauges_[kReady];
  prometheus::Gauge* const total = &gauges_[kTotal];
  prometheus::Gauge* const panic = &gauges_[kPanic];
  prometheus::Gauge* const generation = &gauges_[kGeneration];
  prometheus::Counter* const rebuilds = &counters_[kRebuilds];
  // Watch: subscribers, and updates sent by kind.
  prometheus::Gauge* const watch_subscribers = &gauges_[kWatchSubscribers];
  prometheus::Counter* const watch_full = &counters_[kWatchFull];
  prometheus::Counter* const watch_delta = &counters_[kWatchDelta];
  prometheus::Counter* const watch_unchanged = &counters_[kWatchUnchanged];
  prometheus::Counter* const watch_removed = &counters_[kWatchRemoved];
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_GROUP_METRICS_H_
