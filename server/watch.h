// Watch: streams of weight tables to subscribers.
//
// Each stream subscribes to one or more groups. The first message per group
// is the full table; later ones carry the delta from the generation the
// stream last received, or the full table when the stream fell behind (or
// the delta is not smaller). At most one write is in flight per stream, and
// only the newest table of each group is ever queued: a slow reader gets the
// newest table, never a backlog, so server memory per stream is bounded by
// its groups. A stream whose write has not completed for `stall_timeout`
// is ended with RESOURCE_EXHAUSTED. Shutdown ends streams with UNAVAILABLE.
//
// Groups are independent (see the Watch rpc in lookaside.proto): a name the
// registry does not have, at subscription or after a deletion, gets one
// GroupRemoved (cause NOT_FOUND or DELETED) and the stream keeps serving the
// others. The stream stays open even when every name is absent; the group
// registry tells the hub when a group is added and, if a stream waits for
// that name, the stream listens to the group and sends its full table.
// Only a malformed request fails the whole call (INVALID_ARGUMENT).
//
// Thread rules and lock order: the registry's observers_mu_, then the hub's
// mu_, then a group's listeners_mu_, then a stream's mu_, then a group's
// encode_mu_. A stream's mu_ is also taken under the hub's mu_ directly
// (stall checks, shutdown) and under a group's listeners_mu_ (publication);
// nothing holding a stream's mu_ or a group's lock takes the hub's mu_.
#ifndef ASIDE_SERVER_WATCH_H_
#define ASIDE_SERVER_WATCH_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/group_registry.h"
#include "server/metrics.h"

namespace aside::server {

inline constexpr int kMaxWatchGroups = 256;

// Tracks live Watch streams: ends stalled ones, attaches groups that appear
// after a stream asked for them, ends all at shutdown. Observes `groups`
// from construction to destruction (which must come first).
class WatchHub : private GroupRegistry::Observer {
 public:
  // At most `max_streams_per_peer` streams from one peer IP address are
  // open at once; one more is answered RESOURCE_EXHAUSTED naming
  // limits.max_watch_streams_per_peer (0: no limit).
  WatchHub(GroupRegistry* groups, Metrics* metrics,
           absl::Duration stall_timeout, uint32_t max_streams_per_peer = 0);
  ~WatchHub() override;

  // Creates the reactor for one Watch call.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request);

  // Ends every stream with UNAVAILABLE and stops accepting new ones.
  void Shutdown();
  size_t streams() const;

 private:
  class Stream;
  friend class Stream;

  // GroupRegistry::Observer: attaches the group to the streams waiting for
  // its name. On the adding thread, with the registry's observers_mu_ held.
  void OnAdded(const GroupPtr& group) override;
  // Counts a new stream from `peer` (a gRPC peer string) against its cap:
  // OK and the peer's host in `counted`, or RESOURCE_EXHAUSTED. The
  // count is given back by UncountPeerLocked(counted).
  grpc::Status CountPeerLocked(const std::string& peer, std::string* counted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UncountPeerLocked(const std::string& counted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends stalled streams, every min(1 s, stall_timeout / 4).
  void Janitor();

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  const absl::Duration stall_timeout_;
  const uint32_t max_streams_per_peer_;

  // Guards the stream set and the janitor's stop flag; holding it keeps
  // every listed stream alive (OnDone erases under it).
  mutable aside::Mutex mu_;
  std::set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  // Streams counted against each peer's cap, by peer IP address.
  std::map<std::string, uint32_t> per_peer_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_janitor_ ABSL_GUARDED_BY(mu_) = false;
  std::thread janitor_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_WATCH_H_
