// Keeps up with every key under an etcd prefix: a snapshot when there is
// none, then a watch from the snapshot's revision + 1 whose changes are
// handed over in revision order. When the history the watch needs was
// compacted it takes a fresh snapshot and watches again from there. While
// etcd is down it retries the snapshot with backoff (250 ms doubling to
// 5 s); the watch resumes on another member by itself. The store's group
// feed (server/store/etcd_store.h) and the fleet's members/ and health/
// prefixes follow etcd through it.
//
// Threads: snapshot, on_unavailable and on_connected run on the
// follower's thread, the others on the watch's thread. snapshot and
// on_events never run at once (the watch is stopped before a snapshot is
// taken and started after it was handed over); on_connected may run while
// on_events does. Start and Stop from one owning thread; synced() from any
// thread.
#ifndef ASIDE_SERVER_STORE_ETCD_ETCD_FOLLOWER_H_
#define ASIDE_SERVER_STORE_ETCD_ETCD_FOLLOWER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "lib/sync.h"
#include "server/store/etcd/etcd_client.h"

namespace aside::server::etcd {

class Follower {
 public:
  struct Handlers {
    // Reads a snapshot and hands it over, replacing what came before;
    // returns the revision it is at. An error is retried with backoff.
    absl::AnyInvocable<absl::StatusOr<int64_t>()> snapshot;
    // The changes after the snapshot, in revision order.
    absl::AnyInvocable<void(WatchBatch batch)> on_events;
    // Optional: the snapshot failed (once per distinct error while it keeps
    // failing, so that a long outage logs once).
    absl::AnyInvocable<void(const absl::Status&)> on_unavailable;
    // Optional: the history was compacted; a snapshot follows.
    absl::AnyInvocable<void(int64_t compact_revision)> on_compacted;
    // Optional: the watch lost its member (it resumes by itself).
    absl::AnyInvocable<void(const absl::Status&)> on_disconnected;
    // Optional: whether the watch is connected, every second while it runs,
    // and false once it stops. Until a watch fails for the first time it
    // counts as connected (it was started from a revision just read), so a
    // start reports no disconnection.
    absl::AnyInvocable<void(bool connected)> on_connected;
  };

  // `client` must outlive the follower.
  Follower(EtcdClient* client, std::string prefix, Handlers handlers);
  ~Follower();  // Stop()
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // Watches from `revision` + 1 when the caller already holds that
  // snapshot; otherwise takes one first.
  void Start(std::optional<int64_t> revision = std::nullopt);
  // Ends the watch and joins the thread; no handler runs afterwards.
  void Stop();
  // Whether a snapshot was handed over and the watch is connected.
  bool synced() const;

 private:
  void Run();
  // Takes a snapshot, retrying until one is taken or Stop; false on Stop.
  bool Snapshot();
  // Runs one watch until Stop or a compaction.
  void WatchOnce();
  bool Watching() const;

  EtcdClient* const client_;
  const std::string prefix_;
  Handlers handlers_;
  mutable aside::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool need_snapshot_ ABSL_GUARDED_BY(mu_) = true;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  // The current watch lost a member at least once.
  bool watch_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Watch> watch_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A snapshot handler that reads every key under `prefix` and hands them,
// with their revision, to `apply`.
absl::AnyInvocable<absl::StatusOr<int64_t>()> RangeSnapshot(
    EtcdClient* client, std::string prefix,
    absl::AnyInvocable<void(std::vector<KeyValue> kvs, int64_t revision)>
        apply);

}  // namespace aside::server::etcd

#endif  // ASIDE_SERVER_STORE_ETCD_ETCD_FOLLOWER_H_
