#include "server/load/load_view_metrics.h"

namespace aside::server {
namespace {

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& r,
                                                 const char* name,
                                                 const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

LoadViewMetrics::LoadViewMetrics(prometheus::Registry& registry)
    : age(prometheus::BuildGauge()
              .Name("aside_fleet_load_view_age_seconds")
              .Help("Seconds since the last load view update from each peer.")
              .Register(registry)),
      bytes_sent(Counter(registry, "aside_fleet_load_view_bytes_total",
                         "Load view message bytes, by direction.")
                     .Add({{"direction", "sent"}})),
      bytes_received(Counter(registry, "aside_fleet_load_view_bytes_total",
                             "Load view message bytes, by direction.")
                         .Add({{"direction", "received"}})),
      updates_sent(Counter(registry, "aside_fleet_load_view_updates_total",
                           "Load view messages, by direction.")
                       .Add({{"direction", "sent"}})),
      updates_received(Counter(registry, "aside_fleet_load_view_updates_total",
                               "Load view messages, by direction.")
                           .Add({{"direction", "received"}})),
      entries_sent(Counter(registry, "aside_fleet_load_view_entries_total",
                           "Load view (group, backend, source) entries "
                           "carried, by direction.")
                       .Add({{"direction", "sent"}})),
      entries_received(Counter(registry, "aside_fleet_load_view_entries_total",
                               "Load view (group, backend, source) entries "
                               "carried, by direction.")
                           .Add({{"direction", "received"}})),
      rejected(Counter(registry, "aside_fleet_load_view_rejected_total",
                       "Load view entries from peers that were refused.")
                   .Add({})),
      subscribers(prometheus::BuildGauge()
                      .Name("aside_fleet_load_view_subscribers")
                      .Help("Peers subscribed to this replica's load view.")
                      .Register(registry)
                      .Add({})) {}

}  // namespace aside::server
