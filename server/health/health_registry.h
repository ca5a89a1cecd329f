// The shared health registry (DESIGN.md §3): one entry per *target*, the
// pair (address, health-check spec), probed once per interval however many
// groups reference it, its state shared by all of them.
//
// Groups hold targets through RAII handles: Acquire(address, spec, group)
// returns a HealthHandle; the handle's destruction releases the reference
// and the last release removes the target (a probe in flight on it is
// cancelled and its result dropped). Identity is the canonical address plus
// the spec: a backend's weight, locality or metadata is not part of it, so
// changing them never resets health (Pingora keys health by address+weight
// and silently resets it; this registry does not).
//
// States: UNKNOWN -> HEALTHY / UNHEALTHY with rise/fall thresholds on
// consecutive results (see health_state.h for the exact rules). A new target
// is probed immediately; until its first result it counts as ready unless
// the spec sets require_first_probe. Kind `none` never probes and is always
// HEALTHY.
//
// Threads and costs:
// - Acquire, handle release, List, AddObserver/RemoveObserver: any thread;
//   they take the registry mutex briefly (Acquire of a new target also posts
//   it to the prober). List is O(targets log targets).
// - HealthHandle::state()/ready()/ready_since_nanos(): any thread, one
//   atomic load, no lock: what a group reads while building a table.
// - Probes run on the prober's own thread (one Boost.Asio io_context; gRPC
//   probes complete on gRPC's threads and post back to it). Results update
//   the target under the mutex; observers are called on the prober thread
//   after every state flip, in order, with no lock held. They must not
//   block and must not call RemoveObserver.
//
// Fleet ownership (DESIGN.md §11; server/fleet/probe_ownership.h). With
// FleetHooks set, each target carries an "owned" flag from hooks.owned: a
// target this replica does not own waits outside the probe schedule (no
// timer, no socket, no result), and when it becomes owned it is due at
// once. ApplyFleetState sets
// the state another replica's probes published (for targets not owned
// here). Without hooks every target is owned: each replica probes all.
#ifndef ASIDE_SERVER_HEALTH_HEALTH_REGISTRY_H_
#define ASIDE_SERVER_HEALTH_HEALTH_REGISTRY_H_

#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "lib/clock.h"
#include "server/health/health_metrics.h"
#include "server/health/health_state.h"
#include "server/net/backend_relay.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// The outcome of one probe.
struct ProbeResult {
  bool success = false;
  // Why it failed ("connect: connection refused", "http status 503",
  // "grpc status NOT_SERVING", "timeout after 1s"), or a warning on success
  // (a gRPC backend without the health service); empty otherwise.
  std::string reason;
  absl::Duration latency;
  absl::Time finished_at;  // wall clock
};

// A target as Admin ListTargets shows it.
struct TargetInfo {
  uint64_t id = 0;
  std::string address;
  HealthCheckSpec spec;
  HealthState state = HealthState::kUnknown;
  uint32_t consecutive_successes = 0;
  uint32_t consecutive_failures = 0;
  // Not set before the first probe finishes.
  std::optional<ProbeResult> last_result;
  // Probes finished since the target was created.
  uint64_t probes = 0;
  // When the state last changed (wall clock); InfinitePast() if never.
  absl::Time last_transition = absl::InfinitePast();
  // Groups holding a handle, sorted, without duplicates.
  std::vector<std::string> groups;
  // The fleet-wide identity of the target (FleetTargetKey).
  uint64_t fleet_key = 0;
  // Whether this replica probes it (always, without fleet ownership).
  bool probed_here = true;
};

// The stable identity of a target across the fleet: a fixed 64-bit hash of
// the canonical address and every field of the check spec, the same in
// every process and build (lib/hash.h). Probe ownership and the published
// health keys are keyed by it.
uint64_t FleetTargetKey(absl::string_view canonical_address,
                        const HealthCheckSpec& spec);

// A state flip, as observers see it.
struct HealthTransition {
  uint64_t target_id = 0;
  std::string address;
  HealthCheckSpec spec;
  HealthState from = HealthState::kUnknown;
  HealthState to = HealthState::kUnknown;
  // Whether the target counted as ready before and after the flip (see
  // HealthReady). UNKNOWN -> HEALTHY without require_first_probe is a flip
  // that leaves readiness unchanged.
  bool was_ready = false;
  bool ready = false;
  // The probe result that caused it.
  ProbeResult result;
  // Groups referencing the target at the time of the flip, sorted.
  std::vector<std::string> groups;
  uint64_t fleet_key = 0;
  // Counts after the flip.
  HealthCounters counters;
  // Applied from another replica's published state (ApplyFleetState), not
  // from a probe made here.
  bool from_fleet = false;
};

// Every probe result, for tests (see SetProbeObserverForTest).
struct ProbeEvent {
  uint64_t target_id = 0;
  std::string address;
  ProbeResult result;
  // State and counts after applying the result.
  HealthCounters after;
};

namespace health_internal {
class Prober;
struct Target;
class RegistryCore;
}  // namespace health_internal

// A group's reference to a target. Movable, not copyable; destroying or
// Reset()ing it releases the reference. Reads are lock-free. Safe to use and
// destroy from any thread, also after the HealthRegistry object is gone (the
// registry's state lives until the last handle is released; probing stops
// with the registry).
class HealthHandle {
 public:
  HealthHandle() = default;
  HealthHandle(HealthHandle&& other) noexcept = default;
  HealthHandle& operator=(HealthHandle&& other) noexcept;
  HealthHandle(const HealthHandle&) = delete;
  HealthHandle& operator=(const HealthHandle&) = delete;
  ~HealthHandle();

  // False for a default-constructed, moved-from or Reset() handle; the
  // accessors below need a valid handle.
  bool valid() const { return target_ != nullptr; }
  void Reset();

  uint64_t target_id() const;
  // The canonical address.
  const std::string& address() const;
  const HealthCheckSpec& spec() const;
  const std::string& group() const { return group_; }

  // The current state (one atomic load).
  HealthState state() const;
  // Whether the target counts as ready: HEALTHY, or UNKNOWN without
  // require_first_probe (one atomic load).
  bool ready() const;
  // Monotonic nanoseconds (the registry's clock) since the target last
  // became ready, 0 while it is not ready. The creation time for a new
  // target that counts as ready before its first probe. For slow start:
  // t0 = max(this, when the member joined the group).
  int64_t ready_since_nanos() const;

 private:
  friend class health_internal::RegistryCore;
  HealthHandle(std::shared_ptr<health_internal::RegistryCore> core,
               std::shared_ptr<health_internal::Target> target,
               std::string group);

  std::shared_ptr<health_internal::RegistryCore> core_;
  std::shared_ptr<health_internal::Target> target_;
  std::string group_;
};

class HealthRegistry {
 public:
  struct Options {
    // Global cap on probes in flight (ServerConfig::max_concurrent_probes).
    // Probes due beyond it wait in one FIFO queue: fair, and a slow target
    // holds at most one slot for at most its timeout.
    uint32_t max_concurrent_probes = 1000;
    // Timestamps (finish times, transitions, ready_since). Probe timing uses
    // the real steady clock. Null: SystemClock.
    const Clock* clock = nullptr;
    // Seed for interval jitter; 0 picks one at random.
    uint64_t seed = 0;
    // grpc probes go through it, so that a backend's answer is bounded
    // before it is buffered (server/net/backend_relay.h). Null: straight
    // to the backend. Outlives the registry.
    const BackendRelay* relay = nullptr;
  };

  // Starts the prober thread. Metrics are registered in `metrics`, which
  // must outlive the registry (handles released later do not touch it).
  static absl::StatusOr<std::unique_ptr<HealthRegistry>> Create(
      const Options& options, prometheus::Registry& metrics);
  // Stops probing: cancels probes in flight (gRPC calls included), waits for
  // them to end and joins the prober thread. Handles stay valid (their state
  // no longer changes) and may be released later.
  ~HealthRegistry();
  HealthRegistry(const HealthRegistry&) = delete;
  HealthRegistry& operator=(const HealthRegistry&) = delete;

  // References the target (address, spec) for `group`, creating it (and
  // probing it at once) if needed. `address` must be an IP literal
  // "a.b.c.d:port" or "[v6]:port" (any spelling; it is canonicalised) unless
  // the kind is `none`; host names are resolved by discovery before they get
  // here. The spec is assumed validated (ValidateHealthCheck); only what
  // would break the prober is checked here (positive interval and timeout,
  // rise/fall >= 1). A group may hold several handles to one target.
  absl::StatusOr<HealthHandle> Acquire(absl::string_view address,
                                       const HealthCheckSpec& spec,
                                       absl::string_view group);

  // Observers of state flips (see HealthTransition), called on the prober
  // thread. RemoveObserver returns once the observer is no longer running
  // and will not be called again.
  using Observer = std::function<void(const HealthTransition&)>;
  uint64_t AddObserver(Observer observer);
  void RemoveObserver(uint64_t id);

  // Targets referenced by `group` (all targets when empty), sorted by
  // address (then kind and port).
  std::vector<TargetInfo> List(absl::string_view group = {}) const;
  size_t size() const;

  // Fleet probe ownership; see the file comment. Both hooks are called under
  // the registry mutex and must not call back into the registry.
  struct FleetHooks {
    // Whether this replica probes the target with this FleetTargetKey
    // (`timeout`: its probe timeout, how long a first result may take).
    std::function<bool(uint64_t fleet_key, absl::Duration timeout)> owned;
    // The state the fleet last published for a target, used as the initial
    // state of a target created here (nullopt: start UNKNOWN).
    std::function<std::optional<HealthCounters>(uint64_t fleet_key)> published;
  };
  // Sets (or, with empty hooks, clears) the hooks and re-evaluates
  // ownership.
  void SetFleetHooks(FleetHooks hooks);
  // A target whose ownership was re-evaluated.
  struct OwnedTarget {
    uint64_t fleet_key = 0;
    std::string address;
    HealthCounters counters;
  };
  struct Ownership {
    std::vector<OwnedTarget> gained;  // became owned by this call
    std::vector<OwnedTarget> owned;   // every owned target after it
  };
  // Asks hooks.owned again for every target (after a membership change).
  Ownership ReevaluateOwnership();
  // Targets owned here (all of them without hooks).
  size_t owned_size() const;
  // Probes finished of the target `fleet_key`; nullopt when there is none.
  std::optional<uint64_t> ProbeCount(uint64_t fleet_key) const;
  // Applies, on the prober thread, a state another replica published for
  // the target `fleet_key`: ignored when there is no such target or this
  // replica owns it. A change of state is a transition observers see (with
  // from_fleet set). Returns at once.
  void ApplyFleetState(uint64_t fleet_key, const HealthCounters& counters,
                       std::string reason);

  // CPU time the prober thread has used (for bench/ and diagnostics).
  absl::Duration ProberCpuTime() const;

  // Test hooks. Every probe result, on the prober thread (null clears).
  void SetProbeObserverForTest(std::function<void(const ProbeEvent&)> fn);
  // Waits until the prober thread has run everything posted to it before
  // the call (removals included). False on timeout.
  bool FlushForTest(absl::Duration timeout);

 private:
  explicit HealthRegistry(std::shared_ptr<health_internal::RegistryCore> core);
  std::shared_ptr<health_internal::RegistryCore> core_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_HEALTH_HEALTH_REGISTRY_H_
