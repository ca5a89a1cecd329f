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
// others. The stream stays open even when every name is absent; the hub's
// janitor looks absent names up again every kReattachTick and, when a group
// of that name appears, the stream listens to it and sends its full table.
// Only a malformed request fails the whole call (INVALID_ARGUMENT).
#ifndef ASIDE_SERVER_WATCH_H_
#define ASIDE_SERVER_WATCH_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "server/group_registry.h"
#include "server/metrics.h"

namespace aside::server {

inline constexpr int kMaxWatchGroups = 256;
// How often absent names are looked up again while some stream waits for
// one (the registry offers no creation event).
inline constexpr absl::Duration kReattachTick = absl::Milliseconds(100);

// Tracks live Watch streams: ends stalled ones, attaches groups that appear
// after a stream asked for them, ends all at shutdown.
class WatchHub {
 public:
  WatchHub(GroupRegistry* groups, Metrics* metrics,
           absl::Duration stall_timeout);
  ~WatchHub();

  // Creates the reactor for one Watch call.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request);

  // Ends every stream with UNAVAILABLE and stops accepting new ones.
  void Shutdown();
  size_t streams() const;

 private:
  class Stream;
  friend class Stream;

  void Janitor();

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  const absl::Duration stall_timeout_;

  // std::mutex rather than aside::Mutex so ThreadSanitizer sees the
  // ordering (Debian's abseil is not instrumented).
  mutable std::mutex mu_;
  std::condition_variable janitor_changed_;
  std::set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_janitor_ ABSL_GUARDED_BY(mu_) = false;
  // Set (without mu_) when a stream starts waiting for an absent group, so
  // the janitor switches to kReattachTick.
  std::atomic<bool> waiting_{false};
  std::thread janitor_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_WATCH_H_
