#include "server/fleet/probe_ownership.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/rendezvous.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/fleet/fleet_records.h"

namespace aside::server::fleet {
namespace {

// Targets whose first probe after a takeover is timed.
constexpr size_t kTakeoverSample = 16;
// How long past its probe timeout a target not owned here may go without a
// published state before this replica probes it itself.
constexpr absl::Duration kOrphanGrace = absl::Seconds(3);

}  // namespace

ProbeOwnership::ProbeOwnership(etcd::EtcdClient* client, std::string prefix,
                               Membership* membership, HealthRegistry* registry,
                               FleetMetrics metrics)
    : client_(client),
      prefix_(std::move(prefix)),
      health_prefix_(prefix_ + "health/"),
      membership_(membership),
      registry_(registry),
      metrics_(metrics) {
  {
    aside::MutexLock lock(&mu_);
    self_hash_ = RendezvousMemberHash(membership_->id());
  }
  registry_->SetFleetHooks(
      {.owned = [this](uint64_t key,
                       absl::Duration timeout) { return Owns(key, timeout); },
       .published = [this](uint64_t key) -> std::optional<HealthCounters> {
         aside::MutexLock lock(&mu_);
         auto it = published_.find(key);
         if (it == published_.end()) {
           return std::nullopt;
         }
         return it->second;
       }});
  observer_ = registry_->AddObserver(
      [this](const HealthTransition& t) { OnTransition(t); });
  membership_->Subscribe(
      [this](const std::vector<Member>& members) { OnMembers(members); });
}

ProbeOwnership::~ProbeOwnership() { Stop(); }

void ProbeOwnership::Start() {
  follower_ = FollowPrefix(
      client_, health_prefix_,
      /*on_snapshot=*/
      [this](std::vector<etcd::KeyValue> kvs, int64_t) {
        absl::flat_hash_set<uint64_t> present;
        for (const etcd::KeyValue& kv : kvs) {
          if (auto key = ParseHealthKey(health_prefix_, kv.key)) {
            present.insert(*key);
          }
          ApplyRecord(kv);
        }
        aside::MutexLock lock(&mu_);
        absl::erase_if(published_, [&](const auto& entry) {
          return !present.contains(entry.first);
        });
      },
      /*on_events=*/
      [this](const etcd::WatchBatch& batch) {
        for (const etcd::Event& e : batch.events) {
          if (e.type == etcd::Event::Type::kPut) {
            ApplyRecord(e.kv);
          } else if (auto key = ParseHealthKey(health_prefix_, e.kv.key)) {
            // The owner's lease ended: keep the state applied until
            // the new owner publishes.
            aside::MutexLock lock(&mu_);
            published_.erase(*key);
          }
        }
      });
  follower_->Start();
  publisher_ = std::thread([this] {
    NameThisThread("aside-fleet-pub");
    PublishLoop();
  });
}

void ProbeOwnership::Stop() {
  {
    aside::MutexLock lock(&mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  if (follower_ != nullptr) {
    follower_->Stop();
  }
  if (publisher_.joinable()) {
    publisher_.join();
  }
  registry_->RemoveObserver(observer_);
  registry_->SetFleetHooks({});
}

uint64_t OrcaFleetKey(absl::string_view canonical_address) {
  return XxHash64(absl::StrCat("orca|", canonical_address), 0);
}

bool ProbeOwnership::OwnsKey(uint64_t key) const {
  aside::MutexLock lock(&mu_);
  if (!confirmed_ || member_hashes_.empty()) {
    return false;
  }
  return member_hashes_[RendezvousOwner(key, member_hashes_)] == self_hash_;
}

bool ProbeOwnership::Owns(uint64_t fleet_key, absl::Duration timeout) const {
  aside::MutexLock lock(&mu_);
  if (!confirmed_ || member_hashes_.empty()) {
    return true;  // probe everything rather than risk probing nothing
  }
  const size_t owner = RendezvousOwner(fleet_key, member_hashes_);
  if (member_hashes_[owner] == self_hash_) {
    return true;
  }
  if (published_.contains(fleet_key)) {
    unpublished_since_.erase(fleet_key);
    return false;
  }
  // Nothing published by anyone yet: give the owner its first probe's
  // timeout and some, then probe it here.
  const absl::Time now = absl::Now();
  auto [it, inserted] = unpublished_since_.try_emplace(fleet_key, now);
  return now - it->second > timeout + kOrphanGrace;
}

void ProbeOwnership::OnMembers(const std::vector<Member>& members) {
  const bool confirmed = membership_->confirmed();
  const int64_t lease = membership_->lease_id();
  bool republish_all = false;
  bool departed = false;
  {
    aside::MutexLock lock(&mu_);
    if (stopping_) {
      return;
    }
    std::vector<std::string> ids;
    std::vector<uint64_t> hashes;
    for (const Member& m : members) {
      ids.push_back(m.id);
      hashes.push_back(RendezvousMemberHash(m.id));
    }
    if (ids == member_ids_ && confirmed == confirmed_ && lease == lease_) {
      // Only values changed (targets_owned): owners did not.
      return;
    }
    for (const std::string& id : member_ids_) {
      if (!std::binary_search(ids.begin(), ids.end(), id)) {
        departed = true;
      }
    }
    republish_all = confirmed && (!confirmed_ || lease != lease_);
    confirmed_ = confirmed;
    lease_ = lease;
    member_ids_ = std::move(ids);
    member_hashes_ = std::move(hashes);
    // Owners changed: every unpublished target gets its grace again (and
    // entries of targets gone since do not pile up).
    unpublished_since_.clear();
  }
  HealthRegistry::Ownership o = registry_->ReevaluateOwnership();
  const size_t owned = o.owned.size();
  if (metrics_.targets_owned != nullptr) {
    metrics_.targets_owned->Set(static_cast<double>(owned));
  }
  membership_->SetTargetsOwned(static_cast<uint32_t>(owned));
  if (!confirmed) {
    return;
  }
  // The new owner republishes what it starts from; after registering again
  // (a new lease: the old keys are gone) it republishes everything it owns.
  for (const HealthRegistry::OwnedTarget& t :
       republish_all ? o.owned : o.gained) {
    if (t.counters.state != HealthState::kUnknown) {
      Enqueue(t.fleet_key, t.address, t.counters, "");
    }
  }
  if (departed && !o.gained.empty()) {
    if (metrics_.takeovers != nullptr) {
      metrics_.takeovers->Increment();
    }
    Log(LogLevel::kInfo, "fleet.takeover",
        {{"id", membership_->id()},
         {"targets", absl::StrCat(o.gained.size())}});
    std::vector<std::pair<uint64_t, uint64_t>> sample;
    for (size_t i = 0; i < o.gained.size() && i < kTakeoverSample; ++i) {
      sample.emplace_back(
          o.gained[i].fleet_key,
          registry_->ProbeCount(o.gained[i].fleet_key).value_or(0));
    }
    aside::MutexLock lock(&mu_);
    takeover_since_ = absl::Now();
    takeover_sample_ = std::move(sample);
  }
}

void ProbeOwnership::OnTransition(const HealthTransition& t) {
  if (t.from_fleet) {
    if (metrics_.transitions_applied != nullptr) {
      metrics_.transitions_applied->Increment();
    }
    return;
  }
  {
    aside::MutexLock lock(&mu_);
    if (!confirmed_) {
      return;  // republished when membership is confirmed again
    }
  }
  if (!Owns(t.fleet_key, t.spec.timeout)) {
    return;
  }
  Enqueue(t.fleet_key, t.address, t.counters, t.result.reason);
}

void ProbeOwnership::Enqueue(uint64_t fleet_key, const std::string& address,
                             const HealthCounters& counters,
                             const std::string& reason) {
  std::string value = EncodeHealth({.owner = membership_->id(),
                                    .address = address,
                                    .counters = counters,
                                    .reason = reason,
                                    .at = Rfc3339(absl::Now())});
  aside::MutexLock lock(&mu_);
  pending_[fleet_key] = std::move(value);
}

void ProbeOwnership::ApplyRecord(const etcd::KeyValue& kv) {
  std::optional<uint64_t> key = ParseHealthKey(health_prefix_, kv.key);
  if (!key.has_value()) {
    return;
  }
  absl::StatusOr<HealthRecord> record = ParseHealth(kv.value);
  if (!record.ok()) {
    Log(LogLevel::kWarn, "fleet.bad_health_value",
        {{"key", kv.key}, {"error", std::string(record.status().message())}});
    return;
  }
  if (record->owner == membership_->id()) {
    return;  // our own write
  }
  {
    aside::MutexLock lock(&mu_);
    published_[*key] = record->counters;
  }
  registry_->ApplyFleetState(*key, record->counters, record->reason);
}

void ProbeOwnership::CheckTakeover() {
  std::optional<absl::Time> since;
  std::vector<std::pair<uint64_t, uint64_t>> sample;
  {
    aside::MutexLock lock(&mu_);
    if (!takeover_since_.has_value()) {
      return;
    }
    since = takeover_since_;
    sample = takeover_sample_;
  }
  for (const auto& [key, probes] : sample) {
    std::optional<uint64_t> now = registry_->ProbeCount(key);
    if (now.has_value() && *now <= probes) {
      return;  // not probed here yet
    }
  }
  const absl::Duration took = absl::Now() - *since;
  if (metrics_.takeover_seconds != nullptr) {
    metrics_.takeover_seconds->Observe(absl::ToDoubleSeconds(took));
  }
  aside::MutexLock lock(&mu_);
  if (takeover_since_ == since) {
    takeover_since_.reset();
    takeover_sample_.clear();
  }
}

void ProbeOwnership::DeleteGone(int64_t lease) {
  std::vector<uint64_t> gone;
  for (uint64_t key : written_) {
    if (!registry_->ProbeCount(key).has_value()) {
      gone.push_back(key);
    }
  }
  for (uint64_t key : gone) {
    const std::string k = HealthKey(prefix_, key);
    // Only while the key is still this replica's (bound to its lease).
    etcd::Compare held;
    held.key = k;
    held.target = etcd::Compare::Target::kLease;
    held.number = lease;
    if (client_->Txn({held}, {etcd::Op::Delete(k)}).ok()) {
      written_.erase(key);
    }
  }
}

void ProbeOwnership::PublishLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Time last_recheck = absl::InfinitePast();
  absl::Time last_cleanup = absl::Now();
  while (true) {
    absl::flat_hash_map<uint64_t, std::string> batch;
    bool timing = false;
    {
      aside::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(
          [this] {
            mu_.AssertHeld();
            return stopping_ || !pending_.empty();
          },
          absl::Milliseconds(100));
      if (stopping_) {
        return;
      }
      timing = takeover_since_.has_value();
      batch.swap(pending_);
    }
    if (timing) {
      CheckTakeover();
    }
    bool unpublished = false;
    {
      aside::MutexLock lock(&mu_);
      unpublished = !unpublished_since_.empty();
    }
    if (unpublished && absl::Now() - last_recheck >= absl::Seconds(1)) {
      // Targets waiting for a first published state: probe here the ones
      // whose grace ran out (and stop for those that got one).
      last_recheck = absl::Now();
      HealthRegistry::Ownership o = registry_->ReevaluateOwnership();
      // Tell the replicas that have these targets too what they are.
      for (const HealthRegistry::OwnedTarget& t : o.gained) {
        if (t.counters.state != HealthState::kUnknown) {
          Enqueue(t.fleet_key, t.address, t.counters, "");
        }
      }
    }
    // Targets come and go with groups between membership changes.
    const size_t owned = registry_->owned_size();
    if (metrics_.targets_owned != nullptr) {
      metrics_.targets_owned->Set(static_cast<double>(owned));
    }
    membership_->SetTargetsOwned(static_cast<uint32_t>(owned));
    const int64_t lease = membership_->lease_id();
    if (lease != written_lease_) {
      written_.clear();  // the keys of an old lease go with it
      written_lease_ = lease;
    }
    if (lease != 0 && absl::Now() - last_cleanup >= absl::Seconds(5)) {
      last_cleanup = absl::Now();
      DeleteGone(lease);
    }
    if (batch.empty()) {
      continue;
    }
    if (lease == 0) {
      continue;  // republished when registered again
    }
    // One Txn per kMaxPutsPerTxn states: a replica's first states, or a
    // takeover's republication, are a handful of etcd requests rather than
    // one Put per target.
    absl::flat_hash_map<uint64_t, std::string> failed;
    std::vector<std::pair<uint64_t, std::string>> chunk;
    auto flush = [&] {
      std::vector<etcd::Op> puts;
      puts.reserve(chunk.size());
      for (const auto& [key, value] : chunk) {
        puts.push_back(etcd::Op::Put(HealthKey(prefix_, key), value, lease));
      }
      if (client_->Txn({}, puts).ok()) {
        for (const auto& entry : chunk) {
          written_.insert(entry.first);
        }
        if (metrics_.transitions_published != nullptr) {
          metrics_.transitions_published->Increment(
              static_cast<double>(chunk.size()));
        }
      } else {
        for (auto& [key, value] : chunk) {
          failed.emplace(key, std::move(value));
        }
      }
      chunk.clear();
    };
    for (auto& [key, value] : batch) {
      chunk.emplace_back(key, std::move(value));
      if (chunk.size() == kMaxPutsPerTxn) {
        flush();
      }
    }
    if (!chunk.empty()) {
      flush();
    }
    if (failed.empty()) {
      backoff = absl::Milliseconds(100);
      continue;
    }
    Log(LogLevel::kWarn, "fleet.publish_failed",
        {{"targets", absl::StrCat(failed.size())}, {"action", "retrying"}});
    aside::MutexLock lock(&mu_);
    for (auto& [key, value] : failed) {
      pending_.try_emplace(key, std::move(value));  // a newer value wins
    }
    mu_.AwaitWithTimeout(
        [this] {
          mu_.AssertHeld();
          return stopping_;
        },
        backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace aside::server::fleet
