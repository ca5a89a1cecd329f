// DNS discovery of group members: every watched name is resolved at once and
// then again every interval (with jitter), for as long as it is watched.
// Pingora resolves once at start and never again; Aside keeps following the
// records.
//
// Semantics (see also server/discovery/README.md):
//  - A/AAAA: each address of the name becomes a member on DnsSpec.port.
//    SRV: each target's addresses on the record's port; only the lowest
//    priority tier that resolves is used; SRV weights are ignored.
//  - Every member gets the spec's weight and locality. Members are sorted
//    by canonical address, duplicates removed.
//  - The callback gets the full member set when it differs from the last
//    one reported, and an error status when a resolution fails. Failures
//    never clear the members: the group keeps what it had. Errors are
//    reported when they start or change; the first success after a failure
//    is reported even when the set is unchanged, so the group can clear its
//    error.
//  - NXDOMAIN is a failure (keep the last members), not "zero members": a
//    typo, a deleted zone or a split-horizon mistake must not empty a
//    group. An empty answer (the name exists, no A/AAAA/SRV records) is a
//    success with zero members. `nxdomain_as_empty` flips the NXDOMAIN rule
//    for setups where NXDOMAIN means "no ready endpoints".
#ifndef ASIDE_SERVER_DISCOVERY_DNS_DISCOVERY_H_
#define ASIDE_SERVER_DISCOVERY_DNS_DISCOVERY_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "lib/clock.h"
#include "lib/random.h"
#include "lib/sync.h"
#include "server/discovery/dns_resolver.h"
#include "server/schema/group_spec.h"

namespace aside::server {

struct DnsDiscoveryOptions {
  // "ip:port", "[v6]:port" or a bare IP (port 53), tried in order. Empty:
  // the nameservers of /etc/resolv.conf.
  std::vector<std::string> servers;
  // Per try (c-ares doubles it on each retry round) and tries per server.
  absl::Duration query_timeout = absl::Seconds(2);
  int tries = 2;
  // Each interval is scaled by a uniform factor in [1 - jitter, 1 + jitter]
  // so watches created together do not query in lock step. 0..0.5.
  double jitter = 0.1;
  // Shortest DnsSpec.interval Watch accepts (ValidateDns asks for >= 1 s;
  // tests lower it).
  absl::Duration min_interval = absl::Seconds(1);
  // Resolutions in flight at once (each is 2 queries, SRV 1 + 2 x targets).
  // More due watches wait for a slot, most overdue first: a burst of
  // thousands of queries would overflow a server's socket buffer and turn
  // into timeouts and retries.
  size_t max_in_flight = 64;
  // Treat NXDOMAIN as "zero members" instead of a failure.
  bool nxdomain_as_empty = false;
  // Timestamps (last success, ...) and scheduling. Null: SystemClock.
  const Clock* clock = nullptr;
  // Seeds the jitter (0: from the OS).
  uint64_t seed = 0;
};

using DnsWatchId = uint64_t;

// What operators see for one watch (Admin ListGroups, logs).
struct DnsWatchStatus {
  DnsWatchId id = 0;
  std::string group;
  DnsSpec spec;
  // Members currently reported (the last successful set).
  size_t members = 0;
  // Completed resolutions, successful or not.
  uint64_t resolutions = 0;
  uint64_t consecutive_failures = 0;
  // The error of the last resolution; OK when it succeeded (or none ended
  // yet).
  absl::Status last_error;
  absl::Time last_success = absl::InfinitePast();
  absl::Time last_failure = absl::InfinitePast();
  bool in_flight = false;
};

// Called with the new member set, or with the error of a failed resolution
// (keep the previous members). Runs on the discovery thread, never
// concurrently with itself, and must be quick: every other watch's
// resolutions and callbacks wait for it. Store the set and return; the
// server's groups (server/groups/group_registry.cc) keep it under a lock of
// their own and ask the RebuildScheduler for a table rebuild, which runs on
// another thread. It must not block on anything a caller of Unwatch may
// hold (Unwatch waits for a running callback). It may call Watch, Unwatch,
// ResolveNow and Status, but must not destroy the DnsDiscovery.
using DnsMembersCallback =
    std::function<void(const absl::StatusOr<std::vector<Backend>>&)>;

// Owns one thread that resolves every watched name through one DnsResolver
// (one c-ares channel per DNS server, shared by all watches).
//
// Threading: Watch, Unwatch, ResolveNow, Status and List may be called from
// any thread. Callbacks run on the discovery thread. After Unwatch returns,
// that watch's callback is not running and never runs again (Unwatch from
// inside the callback is allowed and returns at once).
//
// Cost: one thread and one c-ares channel per server for all watches; a
// watch costs a map entry and, while resolving, one or two queries (SRV:
// 1 + 2 x targets). Queries to a slow server only wait on their own timeouts:
// other watches keep resolving. Resolutions of one watch never overlap: the
// next is scheduled an interval after the previous one ends.
class DnsDiscovery {
 public:
  // Registers aside_dns_resolutions_total{group,result},
  // aside_dns_members{group} and
  // aside_dns_last_success_timestamp_seconds{group} in `registry`, which
  // must outlive this object. Fails on bad options.
  static absl::StatusOr<std::unique_ptr<DnsDiscovery>> Create(
      DnsDiscoveryOptions options, prometheus::Registry& registry);
  // Stops the thread; pending queries are abandoned, no callback runs after
  // it returns. Must not be called from a callback.
  ~DnsDiscovery();
  DnsDiscovery(const DnsDiscovery&) = delete;
  DnsDiscovery& operator=(const DnsDiscovery&) = delete;

  // Starts resolving `spec` for `group` now and every spec.interval.
  // `spec` is checked as ValidateDns does (InvalidArgument, "dns.port: ...")
  // except that the interval may go down to options.min_interval. The first
  // callback may run before Watch returns.
  absl::StatusOr<DnsWatchId> Watch(std::string group, DnsSpec spec,
                                   DnsMembersCallback callback);
  // Stops a watch. Unknown ids are ignored. A query in flight is abandoned.
  void Unwatch(DnsWatchId id);
  // Resolves now instead of at the next interval (after the one in flight,
  // if any). Unknown ids are ignored.
  void ResolveNow(DnsWatchId id);

  std::optional<DnsWatchStatus> Status(DnsWatchId id) const;
  // Every watch, by id.
  std::vector<DnsWatchStatus> List() const;

 private:
  struct WatchState;
  struct GroupMetrics;
  struct Delivery {
    DnsWatchId id = 0;
    std::shared_ptr<const DnsMembersCallback> callback;
    absl::StatusOr<std::vector<Backend>> members;
  };

  DnsDiscovery(DnsDiscoveryOptions options,
               prometheus::Family<prometheus::Counter>& resolutions,
               prometheus::Family<prometheus::Gauge>& members,
               prometheus::Family<prometheus::Gauge>& last_success);
  void Run();
  void Wake();
  // Loop thread: a resolution of watch `id` (its `seq`-th) ended.
  void OnResolved(DnsWatchId id, uint64_t seq, DnsResult result);
  // Loop thread: runs the callbacks OnResolved queued, outside c-ares.
  void DeliverPending();
  void Deliver(Delivery delivery);
  GroupMetrics* AcquireGroupMetricsLocked(const std::string& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseGroupMetricsLocked(const std::string& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration NextIntervalLocked(absl::Duration interval)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DnsWatchStatus StatusLocked(const WatchState& watch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DnsDiscoveryOptions options_;
  const Clock& clock_;
  prometheus::Family<prometheus::Counter>& resolutions_family_;
  prometheus::Family<prometheus::Gauge>& members_family_;
  prometheus::Family<prometheus::Gauge>& last_success_family_;

  // Loop thread only.
  std::unique_ptr<DnsResolver> resolver_;
  std::vector<Delivery> deliveries_;

  int wake_fd_ = -1;
  std::thread thread_;
  std::thread::id thread_id_;

  // Guards the watches and their metrics. Never held while c-ares runs a
  // query or while a callback runs.
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  DnsWatchId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<DnsWatchId, std::unique_ptr<WatchState>> watches_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<GroupMetrics>> group_metrics_
      ABSL_GUARDED_BY(mu_);
  // The watch whose callback is running (0: none).
  DnsWatchId delivering_ ABSL_GUARDED_BY(mu_) = 0;
  FastRng rng_ ABSL_GUARDED_BY(mu_);
};

// `interval` scaled by 1 + jitter x (2u - 1), for u uniform in [0, 1).
absl::Duration JitteredInterval(absl::Duration interval, double jitter,
                                double u);

// Checks a DnsSpec for Watch: the schema's ValidateDns under "dns", with this
// discovery's own floor of the interval (options.min_interval) instead of
// the group floor.
absl::Status ValidateDnsWatch(const DnsSpec& spec, absl::Duration min_interval);

}  // namespace aside::server

#endif  // ASIDE_SERVER_DISCOVERY_DNS_DISCOVERY_H_
