#include "server/fleet/membership.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/thread_name.h"
#include "proto/convert.h"
#include "server/base/log.h"
#include "server/fleet/fleet_records.h"

namespace aside::server::fleet {

std::string RandomReplicaId() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return absl::StrFormat("%016x", v);
}

Membership::Membership(etcd::EtcdClient* client, MembershipOptions options)
    : client_(client),
      members_prefix_(options.prefix + "members/"),
      id_(options.id.empty() ? RandomReplicaId() : options.id),
      key_(members_prefix_ + id_),
      ttl_(options.ttl),
      metrics_(options.metrics),
      start_time_(Rfc3339(absl::Now())) {}

Membership::~Membership() { Stop(); }

void Membership::Start(std::string address) {
  {
    aside::MutexLock lock(&mu_);
    if (started_) {
      return;
    }
    started_ = true;
    address_ = std::move(address);
  }
  follower_ = FollowPrefix(
      client_, members_prefix_,
      /*on_snapshot=*/
      [this](std::vector<etcd::KeyValue> kvs, int64_t) {
        {
          aside::MutexLock lock(&mu_);
          absl::flat_hash_map<std::string, Entry> before = std::move(members_);
          members_.clear();
          for (const etcd::KeyValue& kv : kvs) {
            ApplyPut(kv);
            // Keep the age of a lease already known.
            auto it = members_.find(kv.key.substr(members_prefix_.size()));
            auto old = before.find(kv.key.substr(members_prefix_.size()));
            if (it != members_.end() && old != before.end() &&
                old->second.lease == it->second.lease) {
              it->second.lease_seen = old->second.lease_seen;
            }
          }
          synced_ = true;
        }
        Notify();
      },
      /*on_events=*/
      [this](const etcd::WatchBatch& batch) {
        {
          aside::MutexLock lock(&mu_);
          for (const etcd::Event& e : batch.events) {
            if (e.type == etcd::Event::Type::kPut) {
              ApplyPut(e.kv);
            } else {
              members_.erase(e.kv.key.substr(members_prefix_.size()));
            }
          }
        }
        if (!batch.events.empty()) {
          Notify();
        }
      });
  follower_->Start();
  thread_ = std::thread([this] {
    NameThisThread("aside-members");
    Run();
  });
}

void Membership::ApplyPut(const etcd::KeyValue& kv) {
  if (!absl::StartsWith(kv.key, members_prefix_)) {
    return;
  }
  const std::string id = kv.key.substr(members_prefix_.size());
  absl::StatusOr<MemberRecord> record = ParseMember(kv.value);
  if (!record.ok() || record->id != id) {
    Log(LogLevel::kWarn, "fleet.bad_member",
        {{"key", kv.key},
         {"error", record.ok() ? "the value names another id"
                               : std::string(record.status().message())}});
    return;
  }
  Entry& e = members_[id];
  if (e.lease != kv.lease || e.lease_seen == absl::Time()) {
    e.lease = kv.lease;
    e.lease_seen = absl::Now();
  }
  e.member.id = id;
  e.member.address = std::move(record->address);
  e.member.start_time = std::move(record->start_time);
  e.member.targets_owned = record->targets_owned;
}

void Membership::Stop() {
  std::unique_ptr<etcd::LeaseKeepAlive> keepalive;
  int64_t lease = 0;
  {
    aside::MutexLock lock(&mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  if (follower_ != nullptr) {
    follower_->Stop();
  }
  {
    aside::MutexLock lock(&mu_);
    keepalive = std::move(keepalive_);
    lease = lease_;
    lease_ = 0;
  }
  keepalive.reset();
  if (lease != 0) {
    // A clean exit hands this replica's targets over at once instead of
    // after the TTL.
    if (absl::Status s = client_->LeaseRevoke(lease); !s.ok()) {
      Log(LogLevel::kWarn, "fleet.revoke_failed",
          {{"id", id_}, {"error", std::string(s.message())}});
    } else {
      Log(LogLevel::kInfo, "fleet.left", {{"id", id_}});
    }
  }
}

int64_t Membership::lease_id() const {
  aside::MutexLock lock(&mu_);
  return lost_ ? 0 : lease_;
}

bool Membership::ConfirmedLocked() const {
  if (lease_ == 0 || lost_ || !synced_) {
    return false;
  }
  auto it = members_.find(id_);
  return it != members_.end() && it->second.lease == lease_;
}

bool Membership::confirmed() const {
  aside::MutexLock lock(&mu_);
  return ConfirmedLocked();
}

std::vector<Member> Membership::members() const {
  std::vector<Member> out;
  const absl::Time now = absl::Now();
  {
    aside::MutexLock lock(&mu_);
    out.reserve(members_.size());
    for (const auto& [id, e] : members_) {
      out.push_back(e.member);
      out.back().lease_age = now - e.lease_seen;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Member& a, const Member& b) { return a.id < b.id; });
  return out;
}

std::vector<std::string> Membership::member_ids() const {
  std::vector<std::string> ids;
  for (const Member& m : members()) {
    ids.push_back(m.id);
  }
  return ids;
}

void Membership::Describe(v1::ListMembersResponse* out) const {
  out->set_self_id(id_);
  out->set_confirmed(confirmed());
  for (const Member& m : members()) {
    v1::FleetMember* pm = out->add_members();
    pm->set_id(m.id);
    pm->set_address(m.address);
    pm->set_start_time(m.start_time);
    pm->set_targets_owned(m.targets_owned);
    ToProto(m.lease_age, pm->mutable_lease_age());
    pm->set_self(m.id == id_);
  }
}

void Membership::Subscribe(std::function<void(const std::vector<Member>&)> fn) {
  aside::MutexLock lock(&mu_);
  subscribers_.push_back(std::make_shared<const Subscriber>(std::move(fn)));
}

void Membership::SetTargetsOwned(uint32_t n) {
  aside::MutexLock lock(&mu_);
  targets_owned_ = n;
}

std::string Membership::Value() const {
  return EncodeMember({.id = id_,
                       .address = address_,
                       .start_time = start_time_,
                       .targets_owned = targets_owned_});
}

void Membership::Notify() {
  {
    aside::MutexLock lock(&mu_);
    ++changes_;
    if (delivering_) {
      return;  // that thread delivers this change too, after its round
    }
    delivering_ = true;
  }
  while (true) {
    std::vector<std::shared_ptr<const Subscriber>> subscribers;
    {
      aside::MutexLock lock(&mu_);
      if (delivered_ == changes_) {
        delivering_ = false;
        return;
      }
      delivered_ = changes_;
      subscribers = subscribers_;
    }
    const std::vector<Member> now = members();
    if (metrics_.members != nullptr) {
      metrics_.members->Set(static_cast<double>(now.size()));
    }
    for (const auto& fn : subscribers) {
      (*fn)(now);
    }
  }
}

void Membership::Run() {
  absl::Duration backoff = absl::Milliseconds(250);
  std::string logged_error;
  auto fail = [&](absl::string_view what, const absl::Status& s) {
    const std::string message = absl::StrCat(what, ": ", s.message());
    if (message != logged_error) {
      logged_error = message;
      Log(LogLevel::kWarn, "fleet.unregistered",
          {{"id", id_},
           {"error", message},
           {"action", "probing every target; retrying"}});
    }
  };
  while (true) {
    bool need_lease = false;
    bool rewrite = false;
    int64_t lease = 0;
    std::string value;
    std::unique_ptr<etcd::LeaseKeepAlive> old_keepalive;
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      need_lease = lease_ == 0 || lost_;
      if (need_lease) {
        old_keepalive = std::move(keepalive_);
      }
      rewrite = !need_lease && targets_owned_ != written_targets_owned_;
      lease = lease_;
      value = Value();
    }
    old_keepalive.reset();
    bool ok = true;
    if (need_lease) {
      absl::StatusOr<etcd::Lease> granted = client_->LeaseGrant(ttl_);
      if (!granted.ok()) {
        fail("granting a lease", granted.status());
        ok = false;
      } else if (absl::StatusOr<int64_t> put =
                     client_->Put(key_, value, granted->id);
                 !put.ok()) {
        fail("registering", put.status());
        // The unrenewed lease expires by itself.
        ok = false;
      } else {
        auto keepalive = client_->KeepAlive(
            *granted, [this, id = granted->id](absl::Status s) {
              Log(LogLevel::kWarn, "fleet.lease_lost",
                  {{"id", id_},
                   {"lease", absl::StrFormat("%x", id)},
                   {"error", std::string(s.message())},
                   {"action", "probing every target; registering again"}});
              aside::MutexLock lock(&mu_);
              if (lease_ == id) {
                lost_ = true;
              }
            });
        {
          aside::MutexLock lock(&mu_);
          lease_ = granted->id;
          lost_ = false;
          keepalive_ = std::move(keepalive);
          written_targets_owned_ = targets_owned_;
        }
        logged_error.clear();
        Log(LogLevel::kInfo, "fleet.registered",
            {{"id", id_},
             {"key", key_},
             {"lease", absl::StrFormat("%x", granted->id)},
             {"ttl", absl::FormatDuration(granted->ttl)}});
      }
      Notify();  // confirmation may have changed
    } else if (rewrite) {
      if (absl::StatusOr<int64_t> put = client_->Put(key_, value, lease);
          put.ok()) {
        aside::MutexLock lock(&mu_);
        written_targets_owned_ = targets_owned_;
      }
    }
    backoff =
        ok ? absl::Milliseconds(250) : std::min(backoff * 2, absl::Seconds(2));
    bool became_lost = false;
    {
      aside::MutexLock lock(&mu_);
      const bool was_lost = lost_;
      mu_.AwaitWithTimeout(
          [this, was_lost] {
            mu_.AssertHeld();
            return stopping_ || lost_ != was_lost;
          },
          ok ? absl::Seconds(1) : backoff);
      became_lost = lost_ && !was_lost;
    }
    if (became_lost) {
      Notify();  // unconfirmed: the ownership falls back to every target
    }
  }
}

}  // namespace aside::server::fleet
