// Every Prometheus metric of the server, defined in one place. Names follow
// aside_<subsystem>_<what>_<unit>; labels are bounded (group names, policy
// and result enums, probe kinds), never per key or per request.
#ifndef ASIDE_SERVER_BASE_METRICS_H_
#define ASIDE_SERVER_BASE_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/group_metrics.h"

namespace aside::server {

class Metrics {
 private:
  // Declared first: the families below are registered in it.
  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();

 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;
  ~Metrics() = default;

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  // Text exposition of every metric (what /metrics serves).
  std::string Render() const;

  prometheus::Family<prometheus::Gauge>& build_info;
  // The per-group series: picks by group and result, backends by state,
  // panic, table generation, rebuilds, Watch subscribers and updates by
  // kind (server/base/group_metrics.h). Rendered with the families below.
  GroupSeries& group_series() { return group_series_; }
  // Pick RPC handling time, server side, and table rebuilds' duration.
  prometheus::Histogram& pick_duration;
  prometheus::Histogram& table_rebuild_duration;
  // Publications the edges never heard of on their own: a later one in the
  // same publish window replaced them (publication.window).
  prometheus::Counter& publications_folded;
  // The time from a publication to the write that carries it to a Watch
  // subscriber.
  prometheus::Histogram& watch_fanout;
  // Load observations received (ReportLoad and grpclb), by result.
  prometheus::Family<prometheus::Counter>& load_reports;
  prometheus::Counter& load_reports_accepted;
  prometheus::Counter& load_reports_rejected;
  // Accepted load observations by protocol (aside, grpclb, lrs), group and
  // reporter (the credential's name, or "anonymous" in open mode); refused
  // reports and rejected observations by protocol and reason.
  prometheus::Family<prometheus::Counter>& load_reporter_observations;
  prometheus::Family<prometheus::Counter>& load_reports_refused;
  // grpclb streams open, server lists sent by group, client stats received
  // by group and result.
  prometheus::Gauge& grpclb_streams;
  prometheus::Family<prometheus::Counter>& grpclb_server_lists;
  prometheus::Family<prometheus::Counter>& grpclb_lists_built;
  prometheus::Family<prometheus::Counter>& grpclb_client_stats;
  // Admin calls by method and result (ok or the status code name).
  prometheus::Family<prometheus::Counter>& admin_mutations;
  // Requests and streams refused (or ended) because a limit was reached,
  // by the limit's config key without `limits.` (max_watch_streams_per_peer,
  // watch_stall_timeout, max_groups, max_connections,
  // max_connections_per_peer).
  prometheus::Family<prometheus::Counter>& limit_refused;
  // The gRPC port's accept loop (server/net/connection_gate.h): connections by
  // state (pending, active), silent ones closed by reason (evicted,
  // handshake_timeout, hung_up), failed accepts.
  prometheus::Family<prometheus::Gauge>& grpc_connections;
  prometheus::Family<prometheus::Counter>& grpc_connections_closed;
  prometheus::Counter& grpc_accept_errors;
  // Survivable internal errors (bugs that are logged and counted).
  prometheus::Counter& internal_errors;
  // xDS: ADS and LRS streams open (by service: ads, lrs); discovery
  // responses sent by type; discovery requests by type and result (ack,
  // nack, stale, subscribe); names asked for that no group answers, by
  // type; hash-policy groups served with the weighted fallback instead of
  // RING_HASH, by group; LRS locality reports by result.
  prometheus::Family<prometheus::Gauge>& xds_streams;
  prometheus::Family<prometheus::Counter>& xds_responses;
  prometheus::Family<prometheus::Counter>& xds_requests;
  prometheus::Family<prometheus::Counter>& xds_unknown_resources;
  prometheus::Family<prometheus::Counter>& xds_ring_hash_fallbacks;
  prometheus::Family<prometheus::Counter>& xds_load_reports;
  // Config file reloads by result (success, failure); the time of the last
  // successful one; 1 while the last one succeeded; 1 while the file
  // changes settings that only a restart applies.
  prometheus::Family<prometheus::Counter>& config_reloads;
  prometheus::Counter& config_reloads_success;
  prometheus::Counter& config_reloads_failure;
  prometheus::Gauge& config_last_reload_success_time;
  prometheus::Gauge& config_last_reload_successful;
  prometheus::Gauge& config_restart_required;
  // The store of Admin-created groups (by type): 1 while reachable (etcd:
  // while this replica follows its changes), the last revision applied, and
  // errors by kind (unavailable, request, conflict, bad_value, compacted,
  // watch).
  prometheus::Family<prometheus::Gauge>& store_up;
  prometheus::Family<prometheus::Gauge>& store_revision;
  prometheus::Family<prometheus::Counter>& store_errors;
  // Writes per store commit (the group commit's batch size: 1 while writes
  // come one at a time).
  prometheus::Histogram& store_commit_writes;
  // Admin writes folded into an earlier write of the same group: one
  // stored definition and one commit for several writes.
  prometheus::Counter& store_writes_folded;
  // Stored definitions not published because a later one of the same
  // feed batch replaced them.
  prometheus::Counter& store_changes_superseded;
  // Fleet membership and probe ownership (etcd store only): live members
  // this replica sees, health targets it probes, health transitions it
  // published and applied from other replicas, takeovers of a departed
  // member's targets and how long each took (from seeing the departure to
  // the taken-over targets' first probe here).
  prometheus::Gauge& fleet_members;
  prometheus::Gauge& fleet_targets_owned;
  prometheus::Counter& fleet_transitions_published;
  prometheus::Counter& fleet_transitions_applied;
  prometheus::Counter& fleet_takeovers;
  prometheus::Histogram& fleet_takeover_seconds;
  // Out-of-band ORCA (server/load/orca_collector.h): streams open to
  // backends, their reports by result (accepted, rejected, throttled), and
  // each reporting backend's utilisation (application, else CPU).
  prometheus::Gauge& orca_streams;
  prometheus::Family<prometheus::Counter>& orca_reports;
  prometheus::Family<prometheus::Gauge>& orca_utilization;
  // Connections to backends (and etcd) stopped because of what the backend
  // sent (server/net/backend_relay.h), by kind (health, orca, etcd) and
  // backend address: only addresses that sent something refused have a
  // series.
  prometheus::Family<prometheus::Counter>& backend_refused;

 private:
  GroupSeries group_series_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_METRICS_H_
