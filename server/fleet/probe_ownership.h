// One probe per target per fleet (DESIGN.md §11), with the etcd store only.
//
// Ownership: owner(target) = the live member with the highest rendezvous
// weight for the target's FleetTargetKey (lib/rendezvous.h). Every replica
// computes it from the same member ids, so they agree without talking; a
// membership change moves only the departed or arriving replica's share.
// The registry asks Owns() for each target (FleetHooks) and re-evaluates on
// every membership change; a target this replica does not own is not probed
// here (it waits outside the probe schedule, costing nothing), and one that
// becomes owned is probed at once, starting from its current state, which
// is the last state published for it: no flap to UNKNOWN.
//
// Publishing: the owner writes each health *transition* of its targets
// (state and consecutive counts) to <prefix>health/<key> (fleet_records.h)
// under its membership lease, from a publisher thread (etcd writes never
// block the prober), as many as are waiting in one Txn. On a takeover, and
// whenever it registers again, it republishes the current state of the
// targets it owns. Every replica follows <prefix>health/ and applies other
// replicas' states to its own registry, so readiness, panic and picks agree
// fleet-wide. When an owner's keys vanish with its lease, the last applied
// state stays until the new owner publishes.
//
// Targets the owner does not have. Groups are the same on every replica
// once the store has propagated, but config-file groups may differ between
// replicas, and the owner may fail to publish. So a replica that is not the
// owner of a target, and sees no state published for it within its probe
// timeout + 3 s of first asking, probes it itself (and publishes what it
// finds) until another replica's state for it appears. Duplicate probes
// again, rather than a target that nobody probes.
//
// Without confirmed membership (not registered yet, or etcd unreachable
// past the TTL) Owns() is true for every target: the replica probes
// everything, as without etcd. Duplicate probes are the safe failure; a
// target probed by nobody is not.
//
// Threads: Owns() from any thread (the registry calls it under its mutex);
// the membership callback, the follower's and the publisher's threads run
// the rest. Stop() before the registry or the membership goes.
#ifndef ASIDE_SERVER_FLEET_PROBE_OWNERSHIP_H_
#define ASIDE_SERVER_FLEET_PROBE_OWNERSHIP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/fleet/fleet_metrics.h"
#include "server/fleet/membership.h"
#include "server/fleet/prefix_follower.h"
#include "server/health/health_registry.h"
#include "server/store/etcd/etcd_client.h"

namespace aside::server::fleet {

// The key whose owner holds the backend's ORCA stream: the backend's
// address alone (every group's reports of it come from one stream).
uint64_t OrcaFleetKey(absl::string_view canonical_address);

class ProbeOwnership {
 public:
  // Health states written per etcd Txn (etcd's default --max-txn-ops is
  // 128).
  static constexpr size_t kMaxPutsPerTxn = 128;

  // Installs the registry hooks and subscribes to `membership`; threads
  // start with Start(). Every pointer must outlive the object.
  ProbeOwnership(etcd::EtcdClient* client, std::string prefix,
                 Membership* membership, HealthRegistry* registry,
                 FleetMetrics metrics);
  ~ProbeOwnership();  // Stop()
  ProbeOwnership(const ProbeOwnership&) = delete;
  ProbeOwnership& operator=(const ProbeOwnership&) = delete;

  void Start();
  // Removes the hooks (every target owned again), stops the threads.
  void Stop();

  // Whether this replica probes the target (`timeout`: its probe timeout).
  bool Owns(uint64_t fleet_key, absl::Duration timeout) const;
  // Whether this replica is the rendezvous owner of `key` among the live
  // members; false without confirmed membership (a replica that just
  // started must not take what an owner already holds). For ORCA streams
  // (OrcaFleetKey), whose holders fall back on their own when no owner
  // serves a key (server/load/orca_collector.h).
  bool OwnsKey(uint64_t key) const;

 private:
  void OnMembers(const std::vector<Member>& members);
  void OnTransition(const HealthTransition& t);
  void Enqueue(uint64_t fleet_key, const std::string& address,
               const HealthCounters& counters, const std::string& reason);
  void ApplyRecord(const etcd::KeyValue& kv);
  void PublishLoop();
  // Deletes the keys this replica wrote for targets it no longer has, so
  // that a target removed from every group does not leave its state behind
  // for as long as this replica lives.
  void DeleteGone(int64_t lease);
  // Observes the takeover time once the sampled targets were probed.
  void CheckTakeover();

  etcd::EtcdClient* const client_;
  const std::string prefix_;
  const std::string health_prefix_;
  Membership* const membership_;
  HealthRegistry* const registry_;
  const FleetMetrics metrics_;
  uint64_t observer_ = 0;

  mutable aside::Mutex mu_;
  bool confirmed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> member_hashes_ ABSL_GUARDED_BY(mu_);
  uint64_t self_hash_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> member_ids_ ABSL_GUARDED_BY(mu_);
  // The states other replicas published, by FleetTargetKey.
  absl::flat_hash_map<uint64_t, HealthCounters> published_ ABSL_GUARDED_BY(mu_);
  // Targets not owned here and with no state published yet: since when
  // (see "Targets the owner does not have").
  mutable absl::flat_hash_map<uint64_t, absl::Time> unpublished_since_
      ABSL_GUARDED_BY(mu_);
  // Keys this replica wrote under its current lease (deleted when their
  // target goes away here). Publisher thread only.
  absl::flat_hash_set<uint64_t> written_;
  int64_t written_lease_ = 0;
  // What to write next, by FleetTargetKey (the newest value wins).
  absl::flat_hash_map<uint64_t, std::string> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // A takeover being timed: when the departure was seen, and targets gained
  // with their probe counts then (a sample).
  std::optional<absl::Time> takeover_since_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> takeover_sample_
      ABSL_GUARDED_BY(mu_);

  std::unique_ptr<etcd::Follower> follower_;
  std::thread publisher_;
};

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_PROBE_OWNERSHIP_H_
