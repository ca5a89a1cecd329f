// Keeps a local copy of every key under an etcd prefix: a snapshot (Range at
// one revision), then a watch from that revision + 1; when the history the
// watch needs was compacted, a fresh snapshot and a new watch. While etcd is
// down it retries with backoff (250 ms doubling to 5 s), and the watch
// resumes on another member by itself. The same shape as EtcdStore's feed
// (server/etcd_store.h), for the fleet's members/ and health/ prefixes.
//
// Threads: handlers run on the follower's thread or the watch's thread,
// never both at once (the watch is stopped before a snapshot is taken).
// Start and Stop from one owning thread; synced() from any thread.
#ifndef ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_
#define ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"
#include "server/etcd/etcd_client.h"

namespace aside::server::fleet {

class PrefixFollower {
 public:
  struct Handlers {
    // Every key under the prefix as of `revision`: replaces what came before.
    std::function<void(std::vector<etcd::KeyValue> kvs, int64_t revision)>
        on_snapshot;
    // The changes after the snapshot, in revision order.
    std::function<void(const etcd::WatchBatch& batch)> on_events;
  };

  // `client` must outlive the follower.
  PrefixFollower(etcd::EtcdClient* client, std::string prefix,
                 Handlers handlers);
  ~PrefixFollower();  // Stop()
  PrefixFollower(const PrefixFollower&) = delete;
  PrefixFollower& operator=(const PrefixFollower&) = delete;

  void Start();
  // Ends the watch and joins the thread; no handler runs afterwards.
  void Stop();
  // Whether a snapshot was handed over and the watch is connected.
  bool synced() const;

 private:
  void Run();

  etcd::EtcdClient* const client_;
  const std::string prefix_;
  Handlers handlers_;
  mutable aside::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool need_snapshot_ ABSL_GUARDED_BY(mu_) = true;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<etcd::Watch> watch_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_
