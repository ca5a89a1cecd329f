// Watch: streams of weight tables to subscribers, by either method: Watch
// (server-streaming) or WatchConfirmed (bidi: the subscriber answers the
// updates that take a backend out; see DrainConfirmations).
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
// Watch is served on gRPC's completion-queue API: the hub owns its
// completion queues, each polled by one thread of its own, which accepts
// calls and starts and completes every write of its streams (the callback
// API hands each completion to another thread, a context switch and a
// wake-up per stream write). A publication only queues the streams that
// have a write to start and wakes the queue's thread once.
//
// Groups are independent (see the Watch rpc in lookaside.proto): a name the
// registry does not have, at subscription or after a deletion, gets one
// GroupRemoved (cause NOT_FOUND or DELETED) and the stream keeps serving the
// others. The stream stays open even when every name is absent; the group
// registry tells the hub when a group is added and, if a stream waits for
// that name, the stream listens to the group and sends its full table.
// Only a malformed request fails the whole call (INVALID_ARGUMENT).
//
// Thread rules and lock order: the stream set's lock
// (server/base/stream_set.h), then a stream's mu_ (a group's encoding is
// read without a lock); the hub's mu_ (its completion queues' life) is
// taken alone. Groups added and publications reach the hub and its
// streams on the group publisher's thread with no lock of the registry's
// or a group's held (the hub listens to every group,
// GroupRegistry::AddListener; a stream to its groups); nothing holding a
// stream's mu_ takes the set's lock.
//
// The hub is watch.cc; one stream (WatchHub::Stream, its life and thread
// rules) is watch_stream.h and watch_stream.cc.
#ifndef ASIDE_SERVER_API_WATCH_H_
#define ASIDE_SERVER_API_WATCH_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/api/drain_confirmations.h"
#include "server/api/peer_stream_limit.h"
#include "server/base/metrics.h"
#include "server/base/stream_set.h"
#include "server/groups/group_registry.h"

namespace aside::server {

inline constexpr int kMaxWatchGroups = 256;
// Completion queues (one thread each) Watch is served on: two measured
// cheaper per stream than one on two cores (bench/README.md, "Fan-out").
inline constexpr int kWatchThreads = 2;

// Tracks live Watch streams: ends stalled ones, attaches groups that appear
// after a stream asked for them, ends all at shutdown. Observes `groups`
// from construction to destruction (which must come first).
class WatchHub : private Group::Listener {
 public:
  // At most `max_streams_per_peer` streams from one peer IP address are
  // open at once; one more is answered RESOURCE_EXHAUSTED naming
  // limits.max_watch_streams_per_peer (0: no limit).
  // The janitor runs on `loop` (null: a thread of its own).
  WatchHub(GroupRegistry* groups, Metrics* metrics,
           absl::Duration stall_timeout, uint32_t max_streams_per_peer = 0,
           EventLoop* loop = nullptr);
  ~WatchHub() override;

  // Asks gRPC for one Watch call on `cq`, announced with `tag` there (the
  // generated RequestWatch of the service's raw async Watch method).
  using Requester = std::function<void(
      grpc::ServerContext* context, grpc::ByteBuffer* request,
      grpc::ServerAsyncWriter<grpc::ByteBuffer>* writer,
      grpc::ServerCompletionQueue* cq, void* tag)>;
  // The same for WatchConfirmed (RequestWatchConfirmed).
  using ConfirmedRequester = std::function<void(
      grpc::ServerContext* context,
      grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream,
      grpc::ServerCompletionQueue* cq, void* tag)>;
  struct Requesters {
    Requester watch;
    ConfirmedRequester confirmed;
  };

  // Where each stream's confirmed generations go (null: nowhere). Set
  // once while wiring, before Serve.
  void set_confirmations(DrainConfirmations* confirmations) {
    confirmations_ = confirmations;
  }

  // Before the server is built: adds the hub's completion queues.
  void AddCompletionQueues(grpc::ServerBuilder& builder,
                           int threads = kWatchThreads);
  // Once the server has started: starts one thread per queue, each with a
  // call of each method requested.
  void Serve(Requesters request);
  // Once the server has shut down (its calls are ended): ends the streams
  // still open, waits for them to go, shuts the queues down, drains them
  // and joins their threads. Idempotent; the destructor does it too.
  void StopServing();

  // Ends every stream with UNAVAILABLE and stops accepting new ones.
  void Shutdown();
  size_t streams() const;

 private:
  class Stream;
  friend class Stream;
  struct Op;

  // A listener of every group: a group added is attached to the streams
  // waiting for its name (on the group publisher's thread, no lock held).
  // Its publications reach the streams through their own listeners.
  void OnAdded(Group& group, const TableConstPtr& table) override;
  void OnPublish(Group& /*group*/, const TableConstPtr& /*table*/) override {}
  void OnRemoved(Group& /*group*/, uint64_t /*generation*/) override {}
  // The janitor's tick: ends stalled streams.
  void EndStalled();
  // One completion queue, its thread, and the streams waiting for that
  // thread to start their next write.
  struct Shard {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread thread;
    aside::Mutex mu;  // taken under a stream's mu_; takes nothing
    std::vector<Stream*> ready ABSL_GUARDED_BY(mu);
    bool armed ABSL_GUARDED_BY(mu) = false;  // `wake` is set
    grpc::Alarm wake;
  };
  // Requests the next call of Watch (or WatchConfirmed) on `shard` (unless
  // StopServing has begun).
  void RequestCall(Shard* shard, bool confirmed);
  // Queues `stream` for the shard's thread, waking it if need be.
  static void Ready(Shard* shard, Stream* stream);
  // Runs the completions of `shard` until its queue is shut down and
  // drained.
  static void Poll(Shard* shard);
  // On the shard's thread: starts the queued streams' writes.
  static void RunReady(Shard* shard);

  GroupRegistry* const groups_;
  Metrics* const metrics_;
  const absl::Duration stall_timeout_;
  // limits.max_watch_streams_per_peer.
  PeerStreamLimit peer_limit_;

  // The open streams: holding its lock keeps every one alive (OnDone
  // removes under it) and serialises Reattach calls.
  StreamSet<Stream> streams_;

  // Serving: the queues and their threads (set up before the server runs,
  // torn down by StopServing on the thread that owns the hub).
  Requesters request_;
  DrainConfirmations* confirmations_ = nullptr;
  std::vector<std::unique_ptr<Shard>> shards_;
  bool serving_ = false;
  // Stream objects alive, requested calls included: the queues are shut
  // down only once none is left, so that no operation starts on a queue
  // that is shut down.
  mutable aside::Mutex mu_;
  size_t alive_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Last: stopped (in the destructor) before the streams it reads go.
  // Every min(1 s, stall_timeout / 4).
  Ticker janitor_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_WATCH_H_
