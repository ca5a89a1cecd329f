#include "server/base/group_metrics.h"

#include <algorithm>
#include <array>
#include <utility>

namespace aside::server {
namespace {

// One group's values, read under the lock and rendered after it.
struct Values {
  const std::string* group;
  std::array<double, 8> counters;
  std::array<double, 5> gauges;
};

// One family's name, help, type and the family it follows.
struct FamilyDef {
  const char* name = "";
  const char* help = "";
  prometheus::MetricType type = prometheus::MetricType::Untyped;
  const char* after = "";
  FamilyDef& Name(const char* v) {
    name = v;
    return *this;
  }
  FamilyDef& Help(const char* v) {
    help = v;
    return *this;
  }
  FamilyDef& Type(prometheus::MetricType v) {
    type = v;
    return *this;
  }
  FamilyDef& After(const char* v) {
    after = v;
    return *this;
  }
};

prometheus::ClientMetric Series(const std::string& group, const char* label,
                                const char* value, double v,
                                prometheus::MetricType type) {
  prometheus::ClientMetric m;
  m.label.push_back({"group", group});
  if (label != nullptr) {
    m.label.push_back({label, value});
  }
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
}

}  // namespace

GroupMetrics::GroupMetrics(GroupSeries* s, std::string name)
    : series(s), group(std::move(name)) {
  series->Insert(this);
}

GroupMetrics::~GroupMetrics() { series->Erase(this); }

void GroupSeries::Insert(const GroupMetrics* group) {
  aside::MutexLock lock(&mu_);
  groups_.insert(group);
}

void GroupSeries::Erase(const GroupMetrics* group) {
  aside::MutexLock lock(&mu_);
  groups_.erase(group);
}

std::vector<GroupSeries::Anchored> GroupSeries::CollectAnchored() const {
  // A GroupMetrics erases itself under mu_ before it dies: everything that
  // reads one (its values, its name) happens under the lock.
  using C = GroupMetrics::CounterIndex;
  using G = GroupMetrics::GaugeIndex;
  using prometheus::MetricType;
  std::vector<Anchored> out;
  out.reserve(7);
  // Each family as the server's other metrics declare theirs (a literal
  // .Name, which the dashboard and alert checks look for).
  auto family = [&](const FamilyDef& def) -> prometheus::MetricFamily& {
    out.push_back({def.after, {def.name, def.help, def.type, {}}});
    return out.back().family;
  };
  prometheus::MetricFamily& picks =
      family(FamilyDef()
                 .Name("aside_picks_total")
                 .Help("Pick RPCs by group and result.")
                 .Type(MetricType::Counter)
                 .After("aside_build_info"));
  prometheus::MetricFamily& backends =
      family(FamilyDef()
                 .Name("aside_group_backends")
                 .Help("Backends of a group by state (ready, total).")
                 .Type(MetricType::Gauge)
                 .After("aside_pick_duration_seconds"));
  prometheus::MetricFamily& panic =
      family(FamilyDef()
                 .Name("aside_group_panic")
                 .Help("1 while fewer backends than the panic threshold are "
                       "ready and picks use all of them.")
                 .Type(MetricType::Gauge)
                 .After("aside_group_backends"));
  prometheus::MetricFamily& generation =
      family(FamilyDef()
                 .Name("aside_table_generation")
                 .Help("Generation of a group's current table.")
                 .Type(MetricType::Gauge)
                 .After("aside_group_panic"));
  prometheus::MetricFamily& rebuilds =
      family(FamilyDef()
                 .Name("aside_table_rebuilds_total")
                 .Help("Tables built, by group.")
                 .Type(MetricType::Counter)
                 .After("aside_table_generation"));
  prometheus::MetricFamily& subscribers =
      family(FamilyDef()
                 .Name("aside_watch_subscribers")
                 .Help("Watch streams subscribed to a group.")
                 .Type(MetricType::Gauge)
                 .After("aside_table_rebuild_duration_seconds"));
  prometheus::MetricFamily& updates =
      family(FamilyDef()
                 .Name("aside_watch_updates_total")
                 .Help("Watch updates sent, by group and kind.")
                 .Type(MetricType::Counter)
                 .After("aside_watch_subscribers"));

  aside::MutexLock lock(&mu_);
  std::vector<Values> values;
  values.reserve(groups_.size());
  for (const GroupMetrics* g : groups_) {
    Values v;
    v.group = &g->group;
    for (int i = 0; i < C::kCounters; ++i) {
      v.counters[i] = g->counters_[i].Value();
    }
    for (int i = 0; i < G::kGauges; ++i) {
      v.gauges[i] = g->gauges_[i].Value();
    }
    values.push_back(v);
  }
  // prometheus-cpp orders a family's children by their labels, the group's
  // name first.
  std::sort(values.begin(), values.end(), [](const Values& a, const Values& b) {
    return *a.group < *b.group;
  });
  const size_t n = values.size();
  picks.metric.reserve(3 * n);
  backends.metric.reserve(2 * n);
  panic.metric.reserve(n);
  generation.metric.reserve(n);
  rebuilds.metric.reserve(n);
  subscribers.metric.reserve(n);
  updates.metric.reserve(4 * n);
  for (const Values& v : values) {
    const std::string& g = *v.group;
    // Within a group, by the second label's value.
    picks.metric.push_back(Series(g, "result", "invalid",
                                  v.counters[C::kPicksInvalid],
                                  MetricType::Counter));
    picks.metric.push_back(Series(g, "result", "ok", v.counters[C::kPicksOk],
                                  MetricType::Counter));
    picks.metric.push_back(Series(g, "result", "unavailable",
                                  v.counters[C::kPicksUnavailable],
                                  MetricType::Counter));
    backends.metric.push_back(
        Series(g, "state", "ready", v.gauges[G::kReady], MetricType::Gauge));
    backends.metric.push_back(
        Series(g, "state", "total", v.gauges[G::kTotal], MetricType::Gauge));
    panic.metric.push_back(
        Series(g, nullptr, nullptr, v.gauges[G::kPanic], MetricType::Gauge));
    generation.metric.push_back(Series(
        g, nullptr, nullptr, v.gauges[G::kGeneration], MetricType::Gauge));
    rebuilds.metric.push_back(Series(
        g, nullptr, nullptr, v.counters[C::kRebuilds], MetricType::Counter));
    subscribers.metric.push_back(Series(g, nullptr, nullptr,
                                        v.gauges[G::kWatchSubscribers],
                                        MetricType::Gauge));
    updates.metric.push_back(Series(
        g, "kind", "delta", v.counters[C::kWatchDelta], MetricType::Counter));
    updates.metric.push_back(Series(
        g, "kind", "full", v.counters[C::kWatchFull], MetricType::Counter));
    updates.metric.push_back(Series(g, "kind", "removed",
                                    v.counters[C::kWatchRemoved],
                                    MetricType::Counter));
    updates.metric.push_back(Series(g, "kind", "unchanged",
                                    v.counters[C::kWatchUnchanged],
                                    MetricType::Counter));
  }
  return out;
}

std::vector<prometheus::MetricFamily> GroupSeries::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  for (Anchored& a : CollectAnchored()) {
    if (!a.family.metric.empty()) {
      out.push_back(std::move(a.family));
    }
  }
  return out;
}

}  // namespace aside::server
