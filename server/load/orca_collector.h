// Out-of-band ORCA (gRFC A51): the server's one stream to each backend that
// a group asks reports of (`orca:` in the group), instead of one per client
// per backend as gRPC's own weighted_round_robin opens them.
//
// Groups say which backends they want reports of (Want, on every table
// build; two groups sharing a backend share its stream, at the shorter of
// their intervals). For each wanted backend one
// xds.service.orca.v3.OpenRcaService/StreamCoreMetrics stream is open; its
// reports are checked and kept as the backend's latest (Latest), which
// table builds read (server/groups: weights by gRFC A58, the locality
// policy's utilisation).
//
// Streams end and come back: a stream that ends is opened again after a
// backoff (1 s growing ×1.6 to 2 min, ±20 % jitter, back to 1 s once a stream
// delivered a report); a backend that answers UNIMPLEMENTED does not serve
// ORCA and is asked again only every `unimplemented_retry`. A backend no
// group wants any longer has its stream cancelled.
//
// Hostile backends are bounded: a report over `max_report_bytes` ends the
// stream before it is buffered when the streams go through a BackendRelay
// (the server's do; then the backoff); a value that is negative,
// not finite or past its bound (utilisation 100, qps and eps 1e9) rejects the
// whole report; reports closer together than half the interval are dropped
// (a flood costs one timestamp compare each). Each is counted in
// aside_orca_reports_total{result} and logged at most once a minute per
// backend.
//
// Threads: Want, Latest and Backends from any thread (one mutex, never held
// while calling out); stream callbacks on gRPC's threads; one thread of its
// own ("aside-orca") opens streams when they are due. Stop() cancels every
// stream and waits for gRPC to finish them.
#ifndef ASIDE_SERVER_LOAD_ORCA_COLLECTOR_H_
#define ASIDE_SERVER_LOAD_ORCA_COLLECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "aside/v1/admin.pb.h"
#include "lib/clock.h"
#include "lib/load/orca_weight.h"
#include "lib/sync.h"
#include "server/net/backend_relay.h"

namespace aside::server {

class Metrics;
struct OrcaShare;

// Whether every value of `load` is finite and within its bound (utilisation
// 0..100, qps and eps 0..1e9); else names the first that is not in `why`.
bool CheckOrcaLoad(const OrcaLoad& load, std::string* why);

class OrcaCollector {
 public:
  struct Options {
    absl::Duration min_backoff = absl::Seconds(1);
    absl::Duration max_backoff = absl::Minutes(2);
    absl::Duration unimplemented_retry = absl::Minutes(5);
    int max_report_bytes = 16 * 1024;
    // Streams go through it, so that a report is bounded before it is
    // buffered (server/net/backend_relay.h). Null: straight to the
    // backend. Outlives the collector.
    const BackendRelay* relay = nullptr;
  };

  // A backend's latest accepted report.
  struct Report {
    OrcaLoad load;
    // When it arrived: monotonic nanoseconds (lib/clock.h), and wall time.
    int64_t received_nanos = 0;
    absl::Time received_at = absl::InfinitePast();
    // Counts the backend's accepted reports: a build that saw `seq` already
    // folded this one in.
    uint64_t seq = 0;
  };

  // What the status page shows of one backend.
  struct BackendView {
    std::string address;
    // "connecting", "streaming", "backoff", "unimplemented", or "peer" (its
    // reports come from the replica that owns it).
    std::string state;
    absl::Duration interval;
    std::optional<Report> last;
    uint64_t accepted = 0;
    uint64_t rejected = 0;
    std::string last_error;
  };

  // `metrics` may be null.
  OrcaCollector(const Clock* clock, Metrics* metrics, Options options);
  explicit OrcaCollector(const Clock* clock, Metrics* metrics = nullptr)
      : OrcaCollector(clock, metrics, Options()) {}
  ~OrcaCollector();  // Stop()
  OrcaCollector(const OrcaCollector&) = delete;
  OrcaCollector& operator=(const OrcaCollector&) = delete;

  // Fleet (etcd store): `owns(address)` says whether this replica holds
  // the backend's stream (rendezvous over the live members, as for probes;
  // ProbeOwnership::OwnsKey). A backend it does not own gets its reports
  // from the owner through the load view (ApplyPeer). When none arrive for
  // three intervals + 3 s after the backend is wanted, or since the last
  // one, it opens a stream of its own (the owner may lack the group: config
  // files can differ) and closes it again once the owner's reports arrive.
  // Without it every replica holds its own streams. Before Start.
  void set_owns(std::function<bool(const std::string& address)> owns);

  void Start();
  void Stop();

  // The backends (canonical addresses) `group` wants reports of, every
  // `interval`; replaces the group's previous set (empty: none).
  void Want(const std::string& group, const std::vector<std::string>& addresses,
            absl::Duration interval);

  std::optional<Report> Latest(const std::string& address) const;
  // Every wanted backend, sorted by address, and the same keyed by it.
  std::vector<BackendView> Backends() const;
  absl::flat_hash_map<std::string, BackendView> BackendsByAddress() const;
  // The latest reports of this replica's own streams, sorted by address
  // (what the load view shares with peers).
  std::vector<OrcaShare> ExportOwn() const;
  // A report another replica shared, for a backend wanted here: taken as
  // the backend's latest unless this replica's own stream serves it (and
  // this replica owns it, or the sender does not).
  void ApplyPeer(const OrcaShare& share);

  // Streams open now (for tests and the metric).
  size_t open_streams() const;
  // Waits until `done` holds of Backends(), checked again on every change
  // here, for at most `timeout`; returns whether it held (tests).
  bool AwaitBackends(
      const std::function<bool(const std::vector<BackendView>&)>& done,
      absl::Duration timeout) const;

 private:
  class Stream;
  struct Backend {
    // Groups that want it, with their intervals.
    std::map<std::string, absl::Duration> wanted_by;
    absl::Duration interval;
    // The open stream (kept alive by gRPC too until its OnDone), or null.
    std::shared_ptr<Stream> stream;
    // When the next stream may be opened (monotonic nanoseconds).
    int64_t due_nanos = 0;
    absl::Duration backoff;
    bool unimplemented = false;
    bool delivered = false;  // the current stream delivered a report
    std::optional<Report> last;
    // The last report came from a peer (ApplyPeer), not a stream here.
    bool last_from_peer = false;
    // When a group first wanted it, and when a peer's report last came.
    int64_t wanted_since = 0;
    int64_t last_peer_nanos = 0;
    uint64_t accepted = 0;
    uint64_t rejected = 0;
    int64_t last_accept_nanos = 0;
    int64_t last_logged_nanos = 0;
    std::string last_error;
  };

  std::vector<BackendView> BackendsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();
  // Opens the streams that are due; returns when the next one is.
  std::optional<int64_t> OpenDueLocked(int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the shortest interval of the groups that want `b`; returns the
  // stream to cancel (outside the lock) when it asked for another.
  std::shared_ptr<Stream> RecomputeLocked(Backend& b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // From the streams' gRPC threads.
  void OnReport(Stream* stream, const OrcaLoad& load, bool valid,
                const std::string& why);
  void OnDone(Stream* stream, int code, const std::string& message,
              std::shared_ptr<Stream> self);
  // Destroys the streams gRPC is done with, outside the lock.
  void DropFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountReport(const char* result);
  // Takes `load` as the backend's latest report.
  void AcceptLocked(const std::string& address, Backend& b,
                    const OrcaLoad& load, int64_t now, bool from_peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  Metrics* const metrics_;
  const Options options_;
  std::function<bool(const std::string&)> owns_;

  mutable aside::Mutex mu_;
  std::map<std::string, Backend> backends_ ABSL_GUARDED_BY(mu_);
  // Per group: the addresses it wants (to drop them on its next Want).
  std::map<std::string, std::vector<std::string>> groups_ ABSL_GUARDED_BY(mu_);
  size_t live_streams_ ABSL_GUARDED_BY(mu_) = 0;
  // Streams gRPC is done with, destroyed on the collector's thread (or by
  // Stop): a channel must not be destroyed on the gRPC thread that ends
  // its last call.
  std::vector<std::shared_ptr<Stream>> finished_ ABSL_GUARDED_BY(mu_);
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Fills state[i].orca of `group` (its backends' last reports) from
// `orca` (Admin's GetGroup).
void OrcaViewsToProto(const OrcaCollector& orca, v1::Group* group);

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_ORCA_COLLECTOR_H_
