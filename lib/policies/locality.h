// locality: load-aware locality (Envoy's load_aware_locality). Two parts:
//
// 1. Zone weights, computed by the control plane on a timer from load
//    reports (ZoneWeightCalculator, or the pure functions below), published
//    in TableSpec::zone_weights:
//    - a zone's utilisation is the mean over its hosts whose last report is
//      fresh (no older than weight_expiration_period) and carries a signal
//      (utilisation > 0, as Envoy: a zero report neither counts nor
//      refreshes);
//    - smoothed per zone with alpha = 1 - exp(-update_period /
//      smoothing_time_constant) (a zone's first fresh value is taken as is;
//      a zone without fresh data forgets its history);
//    - weight = host_count * max(0, 1 - utilisation); a zone without fresh
//      data gets host_count; when every weight is 0 (all overloaded), weights
//      are the host counts.
// 2. The selector, per pick (published weights that are all zero share by
//    host count): the caller's zone (PickRequest::caller, region
//    and zone compared) gets all the traffic while its utilisation is at
//    most the remote zones' host-weighted mean utilisation +
//    utilization_variance_threshold and it has headroom; then, if the
//    remote zones' share is below remote_probe_fraction, the missing share is
//    taken from the caller's zone and spread over the remote zones by host
//    count (so remote load data stays fresh). A zone is drawn with those
//    shares and a child selector built over that zone's members picks inside
//    it (PolicyConfig::child, default round_robin). Zones without data count
//    as utilisation 0 in the comparison. Fallbacks: the rest of the chosen
//    zone, then the other zones by decreasing share.
//
// Selector costs: build O(n log n + Z^2) plus the children's builds (each
// child reuses the previous table's child for the same zone, so a ketama
// child keeps its ring); pick O(Z) string compares to find the caller's
// zone, one random draw, then the child's pick; lock-free, no allocation.
#ifndef ASIDE_LIB_POLICIES_LOCALITY_H_
#define ASIDE_LIB_POLICIES_LOCALITY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend.h"
#include "lib/policy_config.h"
#include "lib/selector.h"
#include "lib/table.h"

namespace aside {

// The last load report of one host, as the control plane keeps it.
struct HostLoadReport {
  Locality locality;
  // Ready hosts make a zone's host_count; only their reports count.
  bool ready = true;
  // Last reported utilisation (ORCA: application, else CPU utilisation);
  // <= 0 or not finite means no signal.
  double utilization = 0;
  // Monotonic time of that report.
  int64_t reported_at_nanos = 0;
};

// alpha = 1 - exp(-update_period / smoothing_time_constant).
double LocalitySmoothingAlpha(const LocalityParams& params);

// Sets each zone's weight from its host_count and utilisation (< 0: no
// fresh data): host_count * max(0, 1 - utilisation), host_count without
// data, host counts when every weight is 0.
void AssignZoneWeights(absl::Span<ZoneWeight> zones);

// The traffic shares of a caller in zones[local] (local = -1: the caller's
// zone is unknown or has no members): local preference and remote probing
// applied to the zone weights. Writes zones.size() values (not normalised)
// into `shares`.
void CallerZoneShares(absl::Span<const ZoneWeight> zones, int local,
                      const LocalityParams& params, absl::Span<double> shares);

// Keeps the smoothed utilisation of each zone between updates. Called by the
// control plane on a timer every update_period, from one thread at a time
// (not thread-safe). O(hosts + zones log zones) per update.
class ZoneWeightCalculator {
 public:
  explicit ZoneWeightCalculator(const LocalityParams& params);

  // Computes the zone weights from the hosts' last reports at `now_nanos`,
  // one entry per zone that has hosts, sorted by (region, zone).
  std::vector<ZoneWeight> Update(absl::Span<const HostLoadReport> hosts,
                                 int64_t now_nanos);

  // Replaces the parameters (a policy change), keeping the history.
  void set_params(const LocalityParams& params);

 private:
  LocalityParams params_;
  double alpha_;
  // Smoothed utilisation by (region, zone).
  std::map<std::pair<std::string, std::string>, double> smoothed_;
};

absl::StatusOr<std::unique_ptr<const Selector>> BuildLocalitySelector(
    const SelectorInput& input, const PolicyConfig& config);

}  // namespace aside

#endif  // ASIDE_LIB_POLICIES_LOCALITY_H_
