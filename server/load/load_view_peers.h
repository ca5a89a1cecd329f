// aside.v1.Fleet/LoadView, the subscribing side: one stream to each peer,
// whose updates are merged into this replica's LoadAggregator.
//
// The peer list comes from outside: the fleet's membership (SetPeers on
// every change of the live set) or the static `fleet.peers` of the config
// file. A peer whose stream answers that it is this replica (same replica
// id) is dropped for good. Each peer gets a thread that keeps its stream
// open, reconnecting with backoff (0.2 s doubling to 5 s; reset by any
// message). A watchdog cancels a stream that has said nothing (not even a
// heartbeat) for `grace`, and forgets a peer's contribution once it has
// not been heard from for `grace` (a peer SetPeers drops is forgotten at
// once). aside_fleet_load_view_age_seconds{peer} follows each peer.
//
// Thread-safe. Locks: mu_ before a link's, a link's before the
// aggregator's; the aggregator never calls back into this.
#ifndef ASIDE_SERVER_LOAD_LOAD_VIEW_PEERS_H_
#define ASIDE_SERVER_LOAD_LOAD_VIEW_PEERS_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/base/event_loop.h"
#include "server/load/load_aggregator.h"
#include "server/load/load_view_metrics.h"
#include "server/load/orca_collector.h"

namespace aside::server {

// The bearer token of `fleet.peer_token_file`, shown to peers: the file's
// first line, trimmed. FAILED_PRECONDITION naming the file when it cannot
// be read or the line is empty.
absl::StatusOr<std::string> ReadPeerToken(const std::string& path);

// A replica to subscribe to. `id` may be empty (a static peer: the stream
// tells it).
struct LoadViewPeer {
  std::string id;
  std::string address;
};

class LoadViewPeers {
 public:
  struct Options {
    // This replica's id (sent to peers; a peer with it is this replica).
    std::string self_id;
    // How long a silent peer keeps counting.
    absl::Duration grace = absl::Seconds(5);
    // Sent as "authorization: Bearer <token>" when not empty.
    std::string token;
    // How to dial peers (null: plaintext).
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Where the watchdog runs (null: a thread of its own).
    EventLoop* loop = nullptr;
  };

  // `loads` and `metrics` (may be null) must outlive this.
  LoadViewPeers(Options options, LoadAggregator* loads,
                LoadViewMetrics* metrics);
  ~LoadViewPeers();
  LoadViewPeers(const LoadViewPeers&) = delete;
  LoadViewPeers& operator=(const LoadViewPeers&) = delete;

  // Hands the peers' ORCA reports to `orca` too (before Start).
  void set_orca(OrcaCollector* orca) { orca_ = orca; }

  // Replaces the peer list (by address); peers that left are forgotten at
  // once. Entries naming this replica's id are skipped.
  void SetPeers(std::vector<LoadViewPeer> peers);
  // Stops every stream and forgets every peer. Idempotent.
  void Stop();

  // Each peer's link now (tests, status).
  struct LinkState {
    std::string address;
    // The id the peer's stream gave (empty before it answered).
    std::string id;
    bool connected = false;
    // The address turned out to be this replica's own: not dialled again.
    bool self = false;
  };
  std::vector<LinkState> links() const;

 private:
  class Link;

  // The watchdog's tick: every link checks its stream and its peer's age.
  void Check();

  const Options options_;
  LoadAggregator* const loads_;
  OrcaCollector* orca_ = nullptr;
  LoadViewMetrics* const metrics_;

  mutable aside::Mutex mu_;
  std::map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Ticker> watchdog_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_LOAD_VIEW_PEERS_H_
