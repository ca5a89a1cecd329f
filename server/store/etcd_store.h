// The fleet store: groups, and the sticky session key, in etcd (DESIGN.md
// §11), behind the Store interface (server/store/store.h).
//
// Layout under the prefix (default "/aside/"):
//   <prefix>groups/<name>   the group's aside.v1.Group as proto JSON
//   <prefix>session_key     the key signing sticky session tokens (raw bytes)
// Other keys under the prefix are left alone.
//
// Writes are transactions conditioned on the group key's mod_revision as the
// writer last applied it (create: the key is absent), so two replicas that
// change one group at once cannot both win: the loser gets ABORTED and
// writes nothing. A write returns once etcd committed it.
//
// Follow follows the groups/ prefix with an etcd::Follower
// (server/store/etcd/etcd_follower.h): a snapshot when it has none (retrying
// with backoff while etcd is down, logging why), then a watch from the
// snapshot's revision + 1 whose changes are handed over in revision order;
// a fresh snapshot when the history the watch needs was compacted. A value that
// does not parse is logged (store.bad_value naming the key and revision),
// counted in aside_store_errors_total{kind="bad_value"} and reported as a
// bad_value change; the rest is served.
//
// Threads: any method from any thread; the feed handlers run on the
// follower's threads, never both at once.
#ifndef ASIDE_SERVER_STORE_ETCD_STORE_H_
#define ASIDE_SERVER_STORE_ETCD_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"
#include "server/base/metrics.h"
#include "server/config/config.h"
#include "server/net/backend_relay.h"
#include "server/store/etcd/etcd_client.h"
#include "server/store/etcd/etcd_follower.h"
#include "server/store/store.h"

namespace aside::server {

// A group's value in etcd: the aside.v1.Group as proto JSON (field names as
// in the proto). Parsing refuses unknown fields and a value that names a
// group other than `name` (its key's), with INVALID_ARGUMENT.
absl::StatusOr<v1::Group> ParseStoredGroup(const std::string& name,
                                           const std::string& value);
absl::StatusOr<std::string> EncodeStoredGroup(const v1::Group& definition);

class EtcdStore final : public Store {
 public:
  // Checks the options and reads the TLS and credentials files; does not
  // connect (so it succeeds while etcd is down). `metrics` and `relay` may
  // be null; a plaintext store's channels go through `relay`, which
  // outlives the store.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Create(
      const StoreConfig& config, Metrics* metrics,
      const BackendRelay* relay = nullptr);
  ~EtcdStore() override;

  std::string type() const override { return "etcd"; }
  std::string location() const override { return location_; }
  absl::StatusOr<StoreSnapshot> Load() override;
  absl::StatusOr<StoreChange> ReadGroup(const std::string& name) override;
  absl::StatusOr<int64_t> PutGroup(const v1::Group& definition,
                                   int64_t expected_revision) override;
  absl::StatusOr<int64_t> DeleteGroup(const std::string& name,
                                      int64_t expected_revision) override;
  // One Txn for the batch (see the .cc for how a conflict stays per write).
  std::vector<absl::StatusOr<int64_t>> Commit(
      const std::vector<StoreWrite>& writes) override;
  absl::Status RaiseGenerationFloor(uint64_t) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> SessionKey(const std::string& proposed) override;
  bool revision_generations() const override { return true; }
  bool starts_unavailable() const override { return true; }
  void Follow(std::optional<int64_t> revision, FeedHandlers handlers) override;
  void StopFollowing() override;
  StoreState state() const override;

  // The key a group is stored under.
  std::string GroupKey(const std::string& name) const;
  // For the fleet's membership and health keys under the same prefix.
  etcd::EtcdClient* client() const { return client_.get(); }
  const std::string& prefix() const { return prefix_; }

 private:
  EtcdStore(std::unique_ptr<etcd::EtcdClient> client, std::string prefix,
            Metrics* metrics);

  // Loads a snapshot and hands it over (on the follower's thread).
  absl::StatusOr<int64_t> TakeSnapshot();
  // An error from the client, as the store reports it: UNAVAILABLE (also
  // for timeouts) naming every endpoint, other codes kept.
  absl::Status Failed(absl::string_view what, const absl::Status& s);
  void NoteError(absl::string_view kind, const std::string& message);
  void SetUp(bool up) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Converts a watch batch (on the watch's thread).
  void Deliver(etcd::WatchBatch batch);

  const std::unique_ptr<etcd::EtcdClient> client_;
  const std::string prefix_;
  const std::string groups_prefix_;
  const std::string location_;
  Metrics* const metrics_;
  prometheus::Gauge* up_gauge_ = nullptr;
  prometheus::Gauge* revision_gauge_ = nullptr;
  // Set by Follow before the follower starts; read-only after.
  FeedHandlers handlers_;
  std::unique_ptr<etcd::Follower> follower_;

  mutable aside::Mutex mu_;
  std::optional<int64_t> revision_ ABSL_GUARDED_BY(mu_);
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  // Why the watch last lost etcd, for the store.down line.
  std::string down_cause_ ABSL_GUARDED_BY(mu_);
  // StopFollowing was called: the watch ends because this process stops
  // it, which is not etcd being down.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_error_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_ETCD_STORE_H_
