#include "server/base/metrics.h"

#include <prometheus/text_serializer.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace aside::server {
namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  // 1 µs .. ~1 s, doubling.
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-6; v < 1.5; v *= 2) {
    b.push_back(v);
  }
  return b;
}

}  // namespace

#ifndef ASIDE_VERSION
#define ASIDE_VERSION "dev"
#endif

Metrics::Metrics()
    : build_info(prometheus::BuildGauge()
                     .Name("aside_build_info")
                     .Help("Build information; the value is always 1.")
                     .Register(*registry_)),
      pick_duration(prometheus::BuildHistogram()
                        .Name("aside_pick_duration_seconds")
                        .Help("Time to handle a Pick RPC inside the server.")
                        .Register(*registry_)
                        .Add({}, LatencyBuckets())),
      table_rebuild_duration(
          prometheus::BuildHistogram()
              .Name("aside_table_rebuild_duration_seconds")
              .Help("Time to build a group's table and selector.")
              .Register(*registry_)
              .Add({}, LatencyBuckets())),
      publications_folded(
          prometheus::BuildCounter()
              .Name("aside_publications_folded_total")
              .Help("Group publications that Watch, xDS and grpclb "
                    "subscribers never got on their own: a later one in "
                    "the same publication.window replaced them.")
              .Register(*registry_)
              .Add({})),
      watch_fanout(prometheus::BuildHistogram()
                       .Name("aside_watch_fanout_seconds")
                       .Help("Time from a table's publication to the start "
                             "of the write that carries it to a subscriber.")
                       .Register(*registry_)
                       .Add({}, LatencyBuckets())),
      load_reports(prometheus::BuildCounter()
                       .Name("aside_load_reports_total")
                       .Help("Load observations received, by result.")
                       .Register(*registry_)),
      load_reports_accepted(load_reports.Add({{"result", "accepted"}})),
      load_reports_rejected(load_reports.Add({{"result", "rejected"}})),
      load_reporter_observations(
          prometheus::BuildCounter()
              .Name("aside_load_reporter_observations_total")
              .Help("Load observations accepted, by protocol (aside, grpclb, "
                    "lrs), group and reporter (credential name or "
                    "anonymous).")
              .Register(*registry_)),
      load_reports_refused(
          prometheus::BuildCounter()
              .Name("aside_load_reports_refused_total")
              .Help("Load reports refused (whole calls, by credentials) and "
                    "observations rejected, by protocol and reason.")
              .Register(*registry_)),
      grpclb_streams(prometheus::BuildGauge()
                         .Name("aside_grpclb_streams")
                         .Help("grpclb BalanceLoad streams open.")
                         .Register(*registry_)
                         .Add({})),
      grpclb_server_lists(prometheus::BuildCounter()
                              .Name("aside_grpclb_server_lists_total")
                              .Help("grpclb server lists sent, by group.")
                              .Register(*registry_)),
      grpclb_lists_built(
          prometheus::BuildCounter()
              .Name("aside_grpclb_server_lists_built_total")
              .Help("grpclb server lists built and serialised, by group: "
                    "once per generation and overload level, shared by "
                    "the group's streams.")
              .Register(*registry_)),
      grpclb_client_stats(prometheus::BuildCounter()
                              .Name("aside_grpclb_client_stats_total")
                              .Help("grpclb client stats received, by group "
                                    "and result.")
                              .Register(*registry_)),
      admin_mutations(prometheus::BuildCounter()
                          .Name("aside_admin_mutations_total")
                          .Help("Admin mutations by method and result.")
                          .Register(*registry_)),
      limit_refused(prometheus::BuildCounter()
                        .Name("aside_limit_refused_total")
                        .Help("Requests, streams and connections refused or "
                              "ended because a limit was reached, by limit.")
                        .Register(*registry_)),
      grpc_connections(prometheus::BuildGauge()
                           .Name("aside_grpc_connections")
                           .Help("Connections on the gRPC port by state "
                                 "(pending: accepted, not yet sending; "
                                 "active: handed to gRPC).")
                           .Register(*registry_)),
      grpc_connections_closed(
          prometheus::BuildCounter()
              .Name("aside_grpc_connections_closed_total")
              .Help("Connections on the gRPC port closed before sending a "
                    "byte, by reason (evicted, handshake_timeout, hung_up).")
              .Register(*registry_)),
      grpc_accept_errors(prometheus::BuildCounter()
                             .Name("aside_grpc_accept_errors_total")
                             .Help("Failed accepts on the gRPC port (EMFILE, "
                                   "ENFILE, ...); accepting goes on.")
                             .Register(*registry_)
                             .Add({})),
      internal_errors(prometheus::BuildCounter()
                          .Name("aside_internal_errors_total")
                          .Help("Internal errors that were survived.")
                          .Register(*registry_)
                          .Add({})),
      xds_streams(prometheus::BuildGauge()
                      .Name("aside_xds_streams")
                      .Help("xDS streams open, by service (ads, lrs).")
                      .Register(*registry_)),
      xds_responses(prometheus::BuildCounter()
                        .Name("aside_xds_responses_total")
                        .Help("ADS responses sent, by resource type.")
                        .Register(*registry_)),
      xds_requests(prometheus::BuildCounter()
                       .Name("aside_xds_requests_total")
                       .Help("ADS requests by resource type and result "
                             "(subscribe, ack, nack, stale, unknown_type, "
                             "too_many_names, name_too_long).")
                       .Register(*registry_)),
      xds_unknown_resources(
          prometheus::BuildCounter()
              .Name("aside_xds_unknown_resources_total")
              .Help("ADS responses that left out a requested name no group "
                    "answers, by resource type.")
              .Register(*registry_)),
      xds_ring_hash_fallbacks(
          prometheus::BuildCounter()
              .Name("aside_xds_ring_hash_fallbacks_total")
              .Help("Hash-policy groups served to a client that cannot take "
                    "RING_HASH with the weighted encoding instead, by group.")
              .Register(*registry_)),
      xds_load_reports(prometheus::BuildCounter()
                           .Name("aside_xds_load_reports_total")
                           .Help("LRS locality reports, by result (accepted, "
                                 "rejected).")
                           .Register(*registry_)),
      config_reloads(prometheus::BuildCounter()
                         .Name("aside_config_reloads_total")
                         .Help("Config file reloads, by result (success, "
                               "failure).")
                         .Register(*registry_)),
      config_reloads_success(config_reloads.Add({{"result", "success"}})),
      config_reloads_failure(config_reloads.Add({{"result", "failure"}})),
      config_last_reload_success_time(
          prometheus::BuildGauge()
              .Name("aside_config_last_reload_success_timestamp_seconds")
              .Help("Time of the last successful config load (start-up or "
                    "reload), seconds since the epoch.")
              .Register(*registry_)
              .Add({})),
      config_last_reload_successful(
          prometheus::BuildGauge()
              .Name("aside_config_last_reload_successful")
              .Help("1 when the last config reload succeeded (or none was "
                    "tried), 0 when it failed and the previous config "
                    "still serves.")
              .Register(*registry_)
              .Add({})),
      config_restart_required(
          prometheus::BuildGauge()
              .Name("aside_config_restart_required")
              .Help("1 when the config file changes settings that take "
                    "effect only after a restart.")
              .Register(*registry_)
              .Add({})),
      store_up(prometheus::BuildGauge()
                   .Name("aside_store_up")
                   .Help("1 while the store of Admin-created groups is "
                         "reachable (etcd: followed), by type.")
                   .Register(*registry_)),
      store_revision(prometheus::BuildGauge()
                         .Name("aside_store_revision")
                         .Help("The last store revision applied, by type.")
                         .Register(*registry_)),
      store_errors(prometheus::BuildCounter()
                       .Name("aside_store_errors_total")
                       .Help("Store errors by kind (unavailable, request, "
                             "conflict, bad_value, compacted, watch).")
                       .Register(*registry_)),
      store_commit_writes(
          prometheus::BuildHistogram()
              .Name("aside_store_commit_writes")
              .Help("Writes per store commit (concurrent Admin writes share "
                    "one commit).")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16,
                                                               32, 64, 128})),
      store_writes_folded(
          prometheus::BuildCounter()
              .Name("aside_store_writes_folded_total")
              .Help("Admin writes folded into an earlier write of the same "
                    "group (one stored definition and one commit for all).")
              .Register(*registry_)
              .Add({})),
      store_changes_superseded(
          prometheus::BuildCounter()
              .Name("aside_store_changes_superseded_total")
              .Help("Stored group definitions not published because a later "
                    "one in the same batch of the store's feed replaced them.")
              .Register(*registry_)
              .Add({})),
      fleet_members(prometheus::BuildGauge()
                        .Name("aside_fleet_members")
                        .Help("Live fleet members this replica sees (etcd "
                              "store only).")
                        .Register(*registry_)
                        .Add({})),
      fleet_targets_owned(prometheus::BuildGauge()
                              .Name("aside_fleet_targets_owned")
                              .Help("Health targets this replica probes for "
                                    "the fleet.")
                              .Register(*registry_)
                              .Add({})),
      fleet_transitions_published(
          prometheus::BuildCounter()
              .Name("aside_fleet_health_transitions_published_total")
              .Help("Health states this replica published to the fleet "
                    "(transitions of targets it owns, and republications on "
                    "takeover).")
              .Register(*registry_)
              .Add({})),
      fleet_transitions_applied(
          prometheus::BuildCounter()
              .Name("aside_fleet_health_transitions_applied_total")
              .Help("Health transitions applied here from states other "
                    "replicas published.")
              .Register(*registry_)
              .Add({})),
      fleet_takeovers(prometheus::BuildCounter()
                          .Name("aside_fleet_takeovers_total")
                          .Help("Times this replica took over targets of a "
                                "departed member.")
                          .Register(*registry_)
                          .Add({})),
      fleet_takeover_seconds(
          prometheus::BuildHistogram()
              .Name("aside_fleet_takeover_seconds")
              .Help("From seeing a member depart to the first probe here of "
                    "the targets taken over.")
              .Register(*registry_)
              .Add({},
                   prometheus::Histogram::BucketBoundaries{0.05, 0.1, 0.25, 0.5,
                                                           1, 2, 5, 10, 30})),
      orca_streams(prometheus::BuildGauge()
                       .Name("aside_orca_streams")
                       .Help("Out-of-band ORCA streams open to backends.")
                       .Register(*registry_)
                       .Add({})),
      orca_reports(prometheus::BuildCounter()
                       .Name("aside_orca_reports_total")
                       .Help("ORCA reports from backends, by result "
                             "(accepted, rejected, throttled).")
                       .Register(*registry_)),
      orca_utilization(prometheus::BuildGauge()
                           .Name("aside_orca_backend_utilization")
                           .Help("A backend's last accepted ORCA utilisation "
                                 "(application, else CPU), by address.")
                           .Register(*registry_)),
      backend_refused(prometheus::BuildCounter()
                          .Name("aside_backend_refused_total")
                          .Help("Connections to backends stopped because "
                                "the backend sent more than a limit allows, "
                                "by kind and backend address.")
                          .Register(*registry_)) {
  build_info.Add({{"version", ASIDE_VERSION}}).Set(1);
  for (const char* result : {"accepted", "rejected", "throttled"}) {
    orca_reports.Add({{"result", result}});
  }
  // Present at zero, so that an alert on their rate sees the first refusal.
  for (const char* limit :
       {"max_watch_streams_per_peer", "max_balancer_streams_per_peer",
        "watch_stall_timeout", "max_groups", "max_connections",
        "max_connections_per_peer", "max_receive_message_bytes",
        "max_stream_resets", "max_streams_per_peer", "max_streams"}) {
    limit_refused.Add({{"limit", limit}});
  }
}

std::string Metrics::Render() const {
  std::vector<prometheus::MetricFamily> registered = registry_->Collect();
  std::vector<GroupSeries::Anchored> groups = group_series_.CollectAnchored();
  std::vector<prometheus::MetricFamily> all;
  all.reserve(registered.size() + groups.size());
  std::vector<bool> placed(groups.size(), false);
  // Each group family goes right after the family it follows (which may be
  // another group family), so the exposition keeps one order.
  auto place_after = [&](const std::string& name, auto& self) -> void {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!placed[i] && groups[i].after == name) {
        placed[i] = true;
        const std::string own = groups[i].family.name;
        if (!groups[i].family.metric.empty()) {
          all.push_back(std::move(groups[i].family));
        }
        self(own, self);
      }
    }
  };
  for (prometheus::MetricFamily& family : registered) {
    const std::string name = family.name;
    all.push_back(std::move(family));
    place_after(name, place_after);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!placed[i] && !groups[i].family.metric.empty()) {
      all.push_back(std::move(groups[i].family));
    }
  }
  // Kept by the log itself (server/base/log.h), which outlives any Metrics.
  prometheus::MetricFamily suppressed{
      .name = "aside_log_lines_suppressed_total",
      .help = "Log lines left out by the per-event rate limit, by event.",
      .type = prometheus::MetricType::Counter};
  for (auto& [event, total] : LogSuppressed()) {
    prometheus::ClientMetric m;
    m.label.push_back({"event", std::move(event)});
    m.counter.value = static_cast<double>(total);
    suppressed.metric.push_back(std::move(m));
  }
  all.push_back(std::move(suppressed));
  prometheus::TextSerializer serializer;
  return serializer.Serialize(all);
}

}  // namespace aside::server
