// A balancing scenario as a text file: the backends with their slots,
// service times and capacities, the changes of capacity under the clients'
// feet, the load steps and the policies to run. The arena (real processes)
// and the simulator (virtual clock) read the same files, so that any figure
// can be rerun from the file it came from.
//
// One directive per line; `#` starts a comment; blank lines are ignored:
//
//   seed 1                 # random seed of arrivals and picks
//   duration 20s           # measured time per load step
//   warmup 2s              # unmeasured time before each step's measurement
//   deadline 2s            # per-call deadline
//   clients 8              # independent clients, each with its own view
//   backend count=8 slots=2 service=10ms capacity=0.5
//   sinkhole count=1       # fails every call at once, reports no load
//   loads 0.5 0.8 0.9 0.95 # fractions of the aggregate capacity
//   event at=5s backend=3 capacity=0.3 for=10s
//   event at=8s backend=7 stall=200ms
//   event at=0s backend=9 warmup=5s
//   policies round_robin p2c_peak_ewma prequal
//
// Backends (and sinkholes) are numbered in file order from 0. A backend
// serves `slots` calls at once, each taking service / capacity; calls
// beyond the slots wait in a FIFO queue. The aggregate capacity, in calls
// per second, is the sum over backends of slots × capacity / service
// (sinkholes excluded); a load step's arrival rate is its fraction of it.
//
// Event times count from the start of a step's measurement (the end of its
// warmup) and repeat in every step. An event does one of:
// - capacity=F [for=D]: the backend's capacity becomes F × its own
//   capacity (F > 0), for D (until the step ends when `for` is absent);
// - stall=D: the backend starts no call for D (calls in service finish);
// - warmup=D: the backend's capacity ramps linearly from 0.1× to 1× over D.
#ifndef ASIDE_BENCH_SCENARIO_SCENARIO_H_
#define ASIDE_BENCH_SCENARIO_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace aside::bench {

struct ScenarioBackend {
  uint32_t slots = 1;
  absl::Duration service = absl::Milliseconds(10);
  // Speed factor: a call takes service / capacity.
  double capacity = 1;
  // Fails every call at once and reports no load.
  bool sinkhole = false;

  // Service time of one call at full capacity.
  absl::Duration call_time() const { return service / capacity; }
  // Calls per second at full capacity (0 for a sinkhole).
  double calls_per_second() const;
};

struct ScenarioEvent {
  enum class Kind : uint8_t { kCapacity, kStall, kWarmup };
  Kind kind = Kind::kCapacity;
  // From the start of the step's measurement.
  absl::Duration at;
  uint32_t backend = 0;
  // kCapacity: the factor of the backend's own capacity.
  double capacity = 1;
  // kCapacity: how long (InfiniteDuration: to the end of the step);
  // kStall: the pause; kWarmup: the ramp.
  absl::Duration length = absl::InfiniteDuration();
  // The line of the file it was read from.
  int line = 0;

  // When the backend is back at its own capacity (at + length;
  // InfiniteDuration when never).
  absl::Duration end() const { return at + length; }
};

struct Scenario {
  // Where it was read from (for messages), "" when parsed from a string.
  std::string source;
  uint64_t seed = 1;
  absl::Duration duration = absl::Seconds(20);
  absl::Duration warmup = absl::Seconds(2);
  absl::Duration deadline = absl::Seconds(2);
  uint32_t clients = 8;
  std::vector<ScenarioBackend> backends;
  std::vector<double> loads;
  std::vector<ScenarioEvent> events;
  std::vector<std::string> policies;

  // Calls per second all non-sinkhole backends serve at full capacity.
  double AggregateCapacity() const;
  // Mean time of one call, weighted by each backend's share of the
  // capacity (what a perfect balancer's calls take without queueing).
  absl::Duration MeanCallTime() const;
  // The factor of backend `b`'s own capacity at time `t` from the start of
  // the measurement (1 when no event applies; 0 during a stall).
  double CapacityFactor(uint32_t b, absl::Duration t) const;
};

// Parses a scenario. Errors are InvalidArgument "source:line: message" (the
// source is `source`, e.g. a file name).
absl::StatusOr<Scenario> ParseScenario(absl::string_view text,
                                       absl::string_view source);
// Reads and parses a file.
absl::StatusOr<Scenario> LoadScenario(const std::string& path);

}  // namespace aside::bench

#endif  // ASIDE_BENCH_SCENARIO_SCENARIO_H_
