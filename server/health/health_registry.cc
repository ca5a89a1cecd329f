#include "server/health/health_registry.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/hash.h"
#include "lib/sync.h"
#include "server/health/prober.h"
#include "server/health/target.h"

namespace aside::server {
namespace health_internal {
namespace {

// Checks what would break the prober with the schema's ValidateProbeSpec;
// the group-level rules (ValidateHealthCheck) were applied when the group was
// accepted.
absl::Status CheckProbeSpec(absl::string_view address,
                            const HealthCheckSpec& spec) {
  absl::Status s = ValidateProbeSpec("health_check", spec);
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("health target ", address, ": ", s.message()));
  }
  return s;
}

}  // namespace

// The registry's state, shared with the handles so that they may outlive
// the HealthRegistry object.
class RegistryCore : public std::enable_shared_from_this<RegistryCore> {
 public:
  RegistryCore(const HealthRegistry::Options& options,
               prometheus::Registry& metrics)
      : clock_(options.clock != nullptr ? options.clock : &SystemClock::Get()),
        metrics_(metrics),
        max_concurrent_probes_(options.max_concurrent_probes),
        relay_(options.relay),
        seed_(options.seed != 0 ? options.seed : std::random_device{}()) {}

  absl::Status Start() {
    auto prober = Prober::Create(max_concurrent_probes_, seed_, relay_,
                                 [this](Target& target, ProbeResult result) {
                                   OnProbeResult(target, std::move(result));
                                 });
    if (!prober.ok()) {
      return prober.status();
    }
    prober_ = *std::move(prober);
    return absl::OkStatus();
  }

  void Shutdown() {
    {
      aside::MutexLock lock(&mu_);
      shut_down_ = true;
    }
    if (prober_ != nullptr) {
      prober_->Shutdown();
    }
  }

  absl::StatusOr<HealthHandle> Acquire(absl::string_view address,
                                       const HealthCheckSpec& spec,
                                       absl::string_view group) {
    if (group.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("health target ", address, ": the group name is empty"));
    }
    absl::StatusOr<Address> parsed = ParseAddress(address);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "health target ", address, ": ", parsed.status().message()));
    }
    const std::string canonical = parsed->ToString();
    if (absl::Status s = CheckProbeSpec(canonical, spec); !s.ok()) {
      return s;
    }
    if (spec.kind != HealthCheckSpec::Kind::kNone && !parsed->is_ip()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "health target ", canonical,
          ": a host name must be resolved to addresses before it is probed"));
    }

    aside::MutexLock lock(&mu_);
    if (shut_down_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "health target ", canonical, ": the health registry is shut down"));
    }
    Key key{canonical, spec};
    auto it = targets_.find(key);
    std::shared_ptr<Target> target;
    if (it != targets_.end()) {
      target = it->second;
    } else {
      const uint16_t port =
          spec.port != 0 ? static_cast<uint16_t>(spec.port) : parsed->port;
      target =
          std::make_shared<Target>(next_id_++, canonical, spec, parsed->host,
                                   port, parsed->kind == Address::Kind::kIpv6);
      target->fleet_key = FleetTargetKey(canonical, spec);
      const bool probed = spec.kind != HealthCheckSpec::Kind::kNone;
      HealthState initial =
          probed ? HealthState::kUnknown : HealthState::kHealthy;
      if (probed && hooks_.published) {
        // Start from what the fleet's owner last published, not UNKNOWN.
        if (std::optional<HealthCounters> published =
                hooks_.published(target->fleet_key)) {
          target->counters = *published;
          initial = published->state;
        }
      }
      if (probed) {
        const bool owned = !hooks_.owned || hooks_.owned(target->fleet_key,
                                                         target->spec.timeout);
        target->owned.store(owned, std::memory_order_release);
        owned_count_ += owned ? 1 : 0;
      }
      target->counters.state = initial;
      target->state.store(initial, std::memory_order_release);
      if (HealthReady(initial, spec.require_first_probe)) {
        target->ready_since_nanos.store(clock_->NowNanos(),
                                        std::memory_order_release);
      }
      metrics_.AddTarget(initial);
      targets_.emplace(std::move(key), target);
      by_fleet_key_[target->fleet_key] = target.get();
      if (spec.kind != HealthCheckSpec::Kind::kNone) {
        // Posted under the lock: a Remove posted by a later release cannot
        // overtake it.
        prober_->Add(target);
      }
    }
    ++target->refs;
    ++target->groups[group];
    return HealthHandle(shared_from_this(), std::move(target),
                        std::string(group));
  }

  void Release(Target& target, const std::string& group) {
    aside::MutexLock lock(&mu_);
    auto g = target.groups.find(group);
    if (g != target.groups.end() && --g->second == 0) {
      target.groups.erase(g);
    }
    if (--target.refs > 0) {
      return;
    }
    target.removed = true;
    if (target.spec.kind != HealthCheckSpec::Kind::kNone &&
        target.owned.load(std::memory_order_relaxed)) {
      --owned_count_;
    }
    if (!shut_down_) {  // the metrics may be gone once the registry is
      metrics_.RemoveTarget(target.counters.state);
    }
    targets_.erase(Key{target.address, target.spec});
    if (auto it = by_fleet_key_.find(target.fleet_key);
        it != by_fleet_key_.end() && it->second == &target) {
      by_fleet_key_.erase(it);
    }
    if (target.spec.kind != HealthCheckSpec::Kind::kNone &&
        prober_ != nullptr) {
      prober_->Remove(target.id);
    }
  }

  // On the prober thread.
  void OnProbeResult(Target& target, ProbeResult result) {
    result.finished_at = clock_->WallNow();
    metrics_.RecordProbe(target.kind, result.success,
                         absl::ToDoubleSeconds(result.latency));
    std::optional<HealthTransition> transition;
    ProbeEvent event;
    {
      aside::MutexLock lock(&mu_);
      if (target.removed) {
        return;
      }
      ++target.probes;
      const HealthState before = target.counters.state;
      const bool changed = ApplyProbeResult(target.rise, target.fall,
                                            result.success, target.counters);
      target.last_result = result;
      if (changed) {
        transition = FlipLocked(target, before, result);
      }
      if (has_probe_observer_.load(std::memory_order_relaxed)) {
        event.target_id = target.id;
        event.address = target.address;
        event.after = target.counters;
      }
    }
    if (!transition && !has_probe_observer_.load(std::memory_order_relaxed)) {
      return;  // the common case: nothing to tell anyone
    }
    event.result = std::move(result);
    Tell(transition ? &*transition : nullptr,
         event.target_id != 0 ? &event : nullptr);
  }

  // Tells the observers of a flip and the probe observer of a result (each
  // when given), with no lock held; RemoveObserver waits for it to end.
  void Tell(const HealthTransition* transition, const ProbeEvent* event) {
    std::shared_ptr<const Observers> observers;
    {
      aside::MutexLock lock(&observers_mu_);
      observers = observers_;
      ++dispatching_;
    }
    if (transition != nullptr) {
      for (const auto& [id, observer] : observers->flips) {
        observer(*transition);
      }
    }
    if (event != nullptr && observers->probes) {
      observers->probes(*event);
    }
    aside::MutexLock lock(&observers_mu_);
    --dispatching_;  // RemoveObserver's waiters wake on the unlock
  }

  // Publishes target.counters.state (changed from `before` by `result`) to
  // the lock-free readers and returns the transition observers get.
  HealthTransition FlipLocked(Target& target, HealthState before,
                              const ProbeResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const HealthState after = target.counters.state;
    const bool require = target.require_first_probe;
    target.last_transition = result.finished_at;
    target.state.store(after, std::memory_order_release);
    const bool was_ready = HealthReady(before, require);
    const bool ready = HealthReady(after, require);
    if (!was_ready && ready) {
      target.ready_since_nanos.store(clock_->NowNanos(),
                                     std::memory_order_release);
    } else if (was_ready && !ready) {
      target.ready_since_nanos.store(0, std::memory_order_release);
    }
    metrics_.RecordTransition(before, after);
    HealthTransition t;
    t.target_id = target.id;
    t.address = target.address;
    t.spec = target.spec;
    t.from = before;
    t.to = after;
    t.was_ready = was_ready;
    t.ready = ready;
    t.result = result;
    t.groups = SortedGroupsLocked(target);
    t.fleet_key = target.fleet_key;
    t.counters = target.counters;
    return t;
  }

  void SetFleetHooks(HealthRegistry::FleetHooks hooks) {
    {
      aside::MutexLock lock(&mu_);
      hooks_ = std::move(hooks);
    }
    ReevaluateOwnership();
  }

  HealthRegistry::Ownership ReevaluateOwnership() {
    HealthRegistry::Ownership out;
    aside::MutexLock lock(&mu_);
    size_t count = 0;
    for (const auto& [key, target] : targets_) {
      if (target->spec.kind == HealthCheckSpec::Kind::kNone) {
        continue;
      }
      const bool owned = !hooks_.owned ||
                         hooks_.owned(target->fleet_key, target->spec.timeout);
      const bool was = target->owned.exchange(owned, std::memory_order_acq_rel);
      if (was != owned) {
        // Posted under the lock, after the flag: the prober acts on the
        // flag's latest value, in order with Add and Remove.
        if (prober_ != nullptr) {
          prober_->OwnershipChanged(target->id);
        }
      }
      if (!owned) {
        continue;
      }
      ++count;
      HealthRegistry::OwnedTarget t{target->fleet_key, target->address,
                                    target->counters};
      if (!was) {
        out.gained.push_back(t);
      }
      out.owned.push_back(std::move(t));
    }
    owned_count_ = count;
    return out;
  }

  size_t owned_size() const {
    aside::MutexLock lock(&mu_);
    return owned_count_;
  }

  std::optional<uint64_t> ProbeCount(uint64_t fleet_key) const {
    aside::MutexLock lock(&mu_);
    auto it = by_fleet_key_.find(fleet_key);
    if (it == by_fleet_key_.end()) {
      return std::nullopt;
    }
    return it->second->probes;
  }

  // On the prober thread.
  void ApplyFleetStateNow(uint64_t fleet_key, const HealthCounters& counters,
                          std::string reason) {
    std::optional<HealthTransition> transition;
    {
      aside::MutexLock lock(&mu_);
      auto it = by_fleet_key_.find(fleet_key);
      if (it == by_fleet_key_.end()) {
        return;
      }
      Target& target = *it->second;
      if (target.removed || target.owned.load(std::memory_order_relaxed)) {
        return;
      }
      const HealthState before = target.counters.state;
      target.counters = counters;
      if (counters.state != before) {
        ProbeResult result;
        result.success = counters.state == HealthState::kHealthy;
        result.reason = std::move(reason);
        result.finished_at = clock_->WallNow();
        transition = FlipLocked(target, before, result);
        transition->from_fleet = true;
      }
    }
    if (transition) {
      Tell(&*transition, nullptr);
    }
  }

  uint64_t AddObserver(HealthRegistry::Observer observer) {
    aside::MutexLock lock(&observers_mu_);
    const uint64_t id = next_observer_id_++;
    auto next = std::make_shared<Observers>(*observers_);
    next->flips.emplace_back(id, std::move(observer));
    observers_ = std::move(next);
    return id;
  }

  void RemoveObserver(uint64_t id) {
    std::shared_ptr<const Observers> before;  // destroyed unlocked
    aside::MutexLock lock(&observers_mu_);
    auto next = std::make_shared<Observers>(*observers_);
    std::erase_if(next->flips,
                  [id](const auto& entry) { return entry.first == id; });
    before = std::exchange(observers_, std::move(next));
    // A dispatch in progress may still call it: wait for it to end.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(observers_mu_) {
      return dispatching_ == 0;
    };
    observers_mu_.Await(aside::Cond(&idle));
  }

  void SetProbeObserver(std::function<void(const ProbeEvent&)> fn) {
    aside::MutexLock lock(&observers_mu_);
    has_probe_observer_.store(fn != nullptr, std::memory_order_relaxed);
    auto next = std::make_shared<Observers>(*observers_);
    next->probes = std::move(fn);
    observers_ = std::move(next);
  }

  std::vector<TargetInfo> List(absl::string_view group) const {
    std::vector<TargetInfo> out;
    {
      aside::MutexLock lock(&mu_);
      for (const auto& [key, target] : targets_) {
        if (!group.empty() && !target->groups.contains(group)) {
          continue;
        }
        TargetInfo info;
        info.id = target->id;
        info.address = target->address;
        info.spec = target->spec;
        info.state = target->counters.state;
        info.consecutive_successes = target->counters.consecutive_successes;
        info.consecutive_failures = target->counters.consecutive_failures;
        info.last_result = target->last_result;
        info.probes = target->probes;
        info.last_transition = target->last_transition;
        info.groups = SortedGroupsLocked(*target);
        info.fleet_key = target->fleet_key;
        info.probed_here = target->spec.kind != HealthCheckSpec::Kind::kNone &&
                           target->owned.load(std::memory_order_relaxed);
        out.push_back(std::move(info));
      }
    }
    std::sort(out.begin(), out.end(),
              [](const TargetInfo& a, const TargetInfo& b) {
                return std::tie(a.address, a.spec.kind, a.spec.port, a.id) <
                       std::tie(b.address, b.spec.kind, b.spec.port, b.id);
              });
    return out;
  }

  size_t size() const {
    aside::MutexLock lock(&mu_);
    return targets_.size();
  }

  Prober* prober() const { return prober_.get(); }

 private:
  struct Key {
    std::string address;
    HealthCheckSpec spec;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      const HealthCheckSpec& s = key.spec;
      size_t h = absl::HashOf(
          key.address, static_cast<int>(s.kind), s.interval, s.timeout,
          s.jitter, s.rise, s.fall, s.require_first_probe, s.port, s.http_path,
          s.http_host, s.http_body_limit, s.grpc_service, s.grpc_authority,
          s.http_expected_statuses.size());
      for (const StatusRange& r : s.http_expected_statuses) {
        h = absl::HashOf(h, r.from, r.to);
      }
      return h;
    }
  };
  struct KeyEq {
    bool operator()(const Key& a, const Key& b) const {
      return a.address == b.address && a.spec == b.spec;
    }
  };

  static std::vector<std::string> SortedGroupsLocked(const Target& target) {
    std::vector<std::string> groups;
    groups.reserve(target.groups.size());
    for (const auto& [name, count] : target.groups) {
      groups.push_back(name);
    }
    std::sort(groups.begin(), groups.end());
    return groups;
  }

  const Clock* const clock_;
  HealthMetrics metrics_;
  const uint32_t max_concurrent_probes_;
  const BackendRelay* const relay_;
  const uint64_t seed_;
  std::unique_ptr<Prober> prober_;  // set by Start, before any use

  mutable aside::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<Target>, KeyHash, KeyEq>
      targets_;             // guarded by mu_
  uint64_t next_id_ = 1;    // guarded by mu_
  bool shut_down_ = false;  // guarded by mu_
  // Fleet ownership (see health_registry.h).
  HealthRegistry::FleetHooks hooks_ ABSL_GUARDED_BY(mu_);
  size_t owned_count_ ABSL_GUARDED_BY(mu_) = 0;
  // FleetTargetKey -> target (the key hashes address and spec, so distinct
  // targets collide with probability ~n^2 / 2^64).
  absl::flat_hash_map<uint64_t, Target*> by_fleet_key_ ABSL_GUARDED_BY(mu_);

  // The observers, replaced whole on a change (a dispatch reads one
  // without holding the lock), and the dispatches in progress, which
  // RemoveObserver waits for.
  struct Observers {
    std::vector<std::pair<uint64_t, HealthRegistry::Observer>> flips;
    std::function<void(const ProbeEvent&)> probes;
  };
  aside::Mutex observers_mu_;
  std::shared_ptr<const Observers> observers_ ABSL_GUARDED_BY(observers_mu_) =
      std::make_shared<const Observers>();
  int dispatching_ ABSL_GUARDED_BY(observers_mu_) = 0;
  uint64_t next_observer_id_ ABSL_GUARDED_BY(observers_mu_) = 1;
  std::atomic<bool> has_probe_observer_{false};
};

}  // namespace health_internal

using health_internal::RegistryCore;
using health_internal::Target;

// ---- HealthHandle ----

HealthHandle::HealthHandle(std::shared_ptr<RegistryCore> core,
                           std::shared_ptr<Target> target, std::string group)
    : core_(std::move(core)),
      target_(std::move(target)),
      group_(std::move(group)) {}

HealthHandle& HealthHandle::operator=(HealthHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    core_ = std::move(other.core_);
    target_ = std::move(other.target_);
    group_ = std::move(other.group_);
  }
  return *this;
}

HealthHandle::~HealthHandle() { Reset(); }

void HealthHandle::Reset() {
  if (target_ != nullptr) {
    core_->Release(*target_, group_);
    target_.reset();
    core_.reset();
  }
}

uint64_t HealthHandle::target_id() const { return target_->id; }
const std::string& HealthHandle::address() const { return target_->address; }
const HealthCheckSpec& HealthHandle::spec() const { return target_->spec; }

HealthState HealthHandle::state() const {
  return target_->state.load(std::memory_order_acquire);
}

bool HealthHandle::ready() const {
  return HealthReady(state(), target_->require_first_probe);
}

int64_t HealthHandle::ready_since_nanos() const {
  return target_->ready_since_nanos.load(std::memory_order_acquire);
}

// ---- HealthRegistry ----

absl::StatusOr<std::unique_ptr<HealthRegistry>> HealthRegistry::Create(
    const Options& options, prometheus::Registry& metrics) {
  if (options.max_concurrent_probes < 1) {
    return absl::InvalidArgumentError(
        "health registry: max_concurrent_probes must be at least 1");
  }
  auto core = std::make_shared<RegistryCore>(options, metrics);
  if (absl::Status s = core->Start(); !s.ok()) {
    return s;
  }
  return std::unique_ptr<HealthRegistry>(new HealthRegistry(std::move(core)));
}

HealthRegistry::HealthRegistry(std::shared_ptr<RegistryCore> core)
    : core_(std::move(core)) {}

HealthRegistry::~HealthRegistry() { core_->Shutdown(); }

absl::StatusOr<HealthHandle> HealthRegistry::Acquire(
    absl::string_view address, const HealthCheckSpec& spec,
    absl::string_view group) {
  return core_->Acquire(address, spec, group);
}

uint64_t HealthRegistry::AddObserver(Observer observer) {
  return core_->AddObserver(std::move(observer));
}

void HealthRegistry::RemoveObserver(uint64_t id) { core_->RemoveObserver(id); }

std::vector<TargetInfo> HealthRegistry::List(absl::string_view group) const {
  return core_->List(group);
}

size_t HealthRegistry::size() const { return core_->size(); }

void HealthRegistry::SetFleetHooks(FleetHooks hooks) {
  core_->SetFleetHooks(std::move(hooks));
}

HealthRegistry::Ownership HealthRegistry::ReevaluateOwnership() {
  return core_->ReevaluateOwnership();
}

size_t HealthRegistry::owned_size() const { return core_->owned_size(); }

std::optional<uint64_t> HealthRegistry::ProbeCount(uint64_t fleet_key) const {
  return core_->ProbeCount(fleet_key);
}

void HealthRegistry::ApplyFleetState(uint64_t fleet_key,
                                     const HealthCounters& counters,
                                     std::string reason) {
  std::weak_ptr<RegistryCore> weak = core_;
  core_->prober()->Post(
      [weak, fleet_key, counters, reason = std::move(reason)]() mutable {
        if (std::shared_ptr<RegistryCore> core = weak.lock()) {
          core->ApplyFleetStateNow(fleet_key, counters, std::move(reason));
        }
      });
}

uint64_t FleetTargetKey(absl::string_view canonical_address,
                        const HealthCheckSpec& spec) {
  // Every field, in a fixed order with separators that cannot occur in the
  // numbers; strings are length-prefixed so no two specs serialise alike.
  std::string s;
  auto str = [&s](absl::string_view v) {
    absl::StrAppend(&s, v.size(), ":", v, "|");
  };
  str(canonical_address);
  absl::StrAppend(&s, static_cast<int>(spec.kind), "|",
                  absl::ToInt64Nanoseconds(spec.interval), "|",
                  absl::ToInt64Nanoseconds(spec.timeout), "|",
                  static_cast<int64_t>(spec.jitter * 1e9), "|", spec.rise, "|",
                  spec.fall, "|", spec.require_first_probe ? 1 : 0, "|",
                  spec.port, "|", spec.http_body_limit, "|");
  str(spec.http_path);
  str(spec.http_host);
  for (const StatusRange& r : spec.http_expected_statuses) {
    absl::StrAppend(&s, r.from, "-", r.to, ",");
  }
  s += "|";
  str(spec.grpc_service);
  str(spec.grpc_authority);
  return Hash64(s, 0x243f6a8885a308d3ULL);
}

absl::Duration HealthRegistry::ProberCpuTime() const {
  return core_->prober()->CpuTime();
}

void HealthRegistry::SetProbeObserverForTest(
    std::function<void(const ProbeEvent&)> fn) {
  core_->SetProbeObserver(std::move(fn));
}

bool HealthRegistry::FlushForTest(absl::Duration timeout) {
  struct Flush {
    aside::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  auto flush = std::make_shared<Flush>();
  core_->prober()->Post([flush] {
    aside::MutexLock lock(&flush->mu);
    flush->done = true;  // the waiter wakes as the lock is released
  });
  aside::MutexLock lock(&flush->mu);
  return flush->mu.AwaitWithTimeout(
      [&] {
        flush->mu.AssertHeld();
        return flush->done;
      },
      timeout);
}

}  // namespace aside::server
