// Fleet membership (DESIGN.md §11), with the etcd store only. Each replica
// registers <prefix>members/<id> (value: fleet_records.h) bound to a lease
// of member_ttl that a background keepalive renews every third of the TTL;
// a replica that dies disappears when its lease expires. Every replica
// follows <prefix>members/ (snapshot + watch, resync on compaction) and
// keeps the live set.
//
// Confirmed membership: this replica holds a live lease, its own key is in
// the set it follows, and the follow is connected. When the keepalive fails
// past the TTL (etcd unreachable, or the lease expired while the process
// was stalled) membership is unconfirmed; the registration loop grants a
// new lease and registers again as soon as etcd answers. Subscribers are
// told of every change of the live set and of confirmation.
//
// Threads: one registration thread, the follower's threads and the
// keepalive's thread. Every method from any thread. Subscribers run one at
// a time, on the thread whose change found no delivery under way, with no
// lock held; changes that come meanwhile are delivered after, as one (each
// subscriber is always given the set as it is now, so none is missed).
// They may call the accessors and Subscribe, but must not Stop.
#ifndef ASIDE_SERVER_FLEET_MEMBERSHIP_H_
#define ASIDE_SERVER_FLEET_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "aside/v1/admin.pb.h"
#include "lib/sync.h"
#include "server/fleet/fleet_metrics.h"
#include "server/fleet/prefix_follower.h"
#include "server/store/etcd/etcd_client.h"

namespace aside::server::fleet {

struct Member {
  std::string id;
  std::string address;     // host:port peers dial
  std::string start_time;  // RFC3339
  uint32_t targets_owned = 0;
  // Since this replica first saw the member's current lease.
  absl::Duration lease_age;
};

struct MembershipOptions {
  std::string prefix = "/aside/";
  // Empty: RandomReplicaId().
  std::string id;
  absl::Duration ttl = absl::Seconds(5);
  FleetMetrics metrics;
};

// 16 lowercase hex digits from a random source.
std::string RandomReplicaId();

class Membership {
 public:
  // `client` must outlive the membership. Nothing runs before Start.
  Membership(etcd::EtcdClient* client, MembershipOptions options);
  ~Membership();  // Stop()
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Registers with `address` (host:port of this replica's gRPC listener)
  // and starts following.
  void Start(std::string address);
  // Stops renewing and following, and revokes the lease (the member key
  // goes at once). Idempotent.
  void Stop();

  const std::string& id() const { return id_; }
  // The lease the member key is bound to; 0 while not registered.
  int64_t lease_id() const;
  bool confirmed() const;
  // The live members, sorted by id.
  std::vector<Member> members() const;
  // Their ids, sorted.
  std::vector<std::string> member_ids() const;
  // The members as the Admin API's ListMembers answers them.
  void Describe(v1::ListMembersResponse* out) const;
  // Called on every change of the live set or of confirmed().
  void Subscribe(std::function<void(const std::vector<Member>&)> fn);
  // Updates targets_owned in the member value (written by the registration
  // thread, when it changed).
  void SetTargetsOwned(uint32_t n);

 private:
  struct Entry {
    Member member;
    int64_t lease = 0;
    absl::Time lease_seen;
  };
  using Subscriber = std::function<void(const std::vector<Member>&)>;
  void Run();
  // Delivers the set to the subscribers (see the header comment).
  void Notify() ABSL_LOCKS_EXCLUDED(mu_);
  void ApplyPut(const etcd::KeyValue& kv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Value() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ConfirmedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  etcd::EtcdClient* const client_;
  const std::string members_prefix_;
  const std::string id_;
  const std::string key_;
  const absl::Duration ttl_;
  const FleetMetrics metrics_;
  const std::string start_time_;

  mutable aside::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t targets_owned_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t written_targets_owned_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Entry> members_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<etcd::LeaseKeepAlive> keepalive_ ABSL_GUARDED_BY(mu_);

  std::vector<std::shared_ptr<const Subscriber>> subscribers_
      ABSL_GUARDED_BY(mu_);
  // Changes noted by Notify, and the last one delivered; a thread is
  // delivering while `delivering_`.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;

  std::unique_ptr<etcd::Follower> follower_;
  std::thread thread_;
};

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_MEMBERSHIP_H_
