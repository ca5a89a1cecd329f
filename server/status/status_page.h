// The status page on the metrics port: `/` is a self-refreshing HTML page
// (HTML, CSS and JS compiled into the binary; it loads nothing from
// anywhere else) and `/status.json` is the data it shows, one snapshot of
// the whole server:
//
// - groups: policy, source, generation, ready/total, panic, picks per
//   second (Pick RPCs), Watch subscribers and grpclb clients;
// - each group's backends: declared and effective weight, readiness, drain,
//   health state with the last probe's result and latency, outlier
//   ejection, load from load reports (in flight, requests and errors per
//   second, mean latency), the server's latency EWMA, picks per second;
// - health targets with the groups that share each;
// - the state store (type and location, filled in by whoever owns it).
//
// Beside it, when the server gives them: /status/history.json, the last
// minutes of groups and backends (StatusHistory, history.h; `?group=NAME`
// for one group, `&backends=0` without backend series), and
// /status/events.json, the event timeline (EventLog, events.h;
// `?group=NAME` for one group's and the fleet-wide ones).
//
// Read-only. Every source is read through its own thread-safe accessor
// (lock-free table and spec snapshots, the registries' short critical
// sections): no lock is held across sources, so a snapshot may mix
// generations of different groups, never a torn group. Rates (picks per
// second) are the difference of counters between two snapshots at least a
// second apart; a snapshot sooner than that reuses the last rates, so many
// open pages do not make the numbers noisy.
//
// Access: when `require_token` is set, /status.json (and the history and
// events beside it) needs an
// `Authorization: Bearer <token>` header with a token of the Admin token
// file (any role, read and up); the HTML page itself carries no data and
// is served to anyone, and sends the token it finds in its URL fragment
// (`/#token=...`, which browsers never send to the server).
//
// Thread-safety: Json() and the handlers from any thread (the rate state
// has its own mutex, taken alone).
#ifndef ASIDE_SERVER_STATUS_STATUS_PAGE_H_
#define ASIDE_SERVER_STATUS_STATUS_PAGE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/fleet/membership.h"
#include "server/net/http_server.h"
#include "server/store/store.h"

namespace aside::server {

class AdminAuth;
class EventLog;
class GroupRegistry;
class GrpclbService;
class HealthRegistry;
class LoadAggregator;
class OrcaCollector;
class StatusHistory;

// What the page says about the state store. The store's owner fills it in
// (a type such as "sqlite" or "etcd", where it lives, and any state worth a
// glance as name/value pairs, e.g. {"leader", "..."} or {"connected",
// "true"}).
struct StoreStatus {
  std::string type;
  std::string location;
  std::vector<std::pair<std::string, std::string>> details;
};

// The store's part of the page: up or not, its revision and last error,
// and with a fleet (`membership` not null) its members and whether the
// membership is confirmed.
StoreStatus StoreStatusOf(const Store& store,
                          const fleet::Membership* membership);

struct StatusSources {
  const GroupRegistry* groups = nullptr;
  // Optional: without them the page leaves their parts out.
  const HealthRegistry* health = nullptr;
  const LoadAggregator* loads = nullptr;
  const OrcaCollector* orca = nullptr;
  const GrpclbService* grpclb = nullptr;
  std::function<StoreStatus()> store;
  const StatusHistory* history = nullptr;
  const EventLog* events = nullptr;
  // Checks tokens when `require_token`; may be null otherwise.
  const AdminAuth* auth = nullptr;
  bool require_token = false;
  const Clock* clock = &SystemClock::Get();
};

class StatusPage {
 public:
  explicit StatusPage(StatusSources sources);
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // The snapshot /status.json serves.
  std::string Json();

  // The routes to register on the metrics port: "/", "/status.json" and,
  // with their sources, "/status/history.json" and "/status/events.json".
  std::vector<std::pair<std::string, HttpHandler>> Routes();

  // The embedded page (for tests).
  static absl::string_view Html();

 private:
  // Counters from the last rate sample, by "group\naddress" (backends) and
  // "group" (groups).
  struct Sample {
    int64_t nanos = 0;
    absl::flat_hash_map<std::string, uint64_t> counts;
  };
  using Rates = absl::flat_hash_map<std::string, double>;

  // Returns the rates for `counts` sampled at `now_nanos`.
  Rates UpdateRates(int64_t now_nanos,
                    absl::flat_hash_map<std::string, uint64_t> counts);

  // Null when `request` may read the data, else the refusal to send.
  std::optional<HttpResponse> Refuse(const HttpRequest& request) const;
  HttpResponse ServeJson(const HttpRequest& request);

  const StatusSources sources_;
  const int64_t started_nanos_;

  aside::Mutex rates_mu_;
  Sample last_sample_ ABSL_GUARDED_BY(rates_mu_);
  Rates last_rates_ ABSL_GUARDED_BY(rates_mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STATUS_STATUS_PAGE_H_
