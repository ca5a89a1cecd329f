// A deterministic discrete-event simulation of a balancing scenario
// (bench/scenario/scenario.h) on a virtual clock: no threads, no sockets.
//
// N independent clients each pick with the lib/ selector and load models the
// stub uses (lib/selector_factory, lib/policies, lib/load), each with its own
// table, its own BackendLoad per backend (own in-flight counts, own latency
// estimates) and the stub's local ejection (3 consecutive failures eject a
// backend for 1 s). M backends serve `slots` calls at once with a FIFO queue
// behind them, at the capacity the scenario's events give them; a sinkhole
// fails every call at once. Arrivals are open-loop Poisson at a fraction of
// the aggregate capacity; a call not answered by the deadline fails at the
// client and leaves the backend's queue (one already in service runs on).
//
// "limit" is the perfect-information dispatcher: it sees every backend's
// exact queue and sends each call to the shortest expected delay,
// (queued + in service + 1) / slots × the call's current service time.
#ifndef ASIDE_BENCH_SIM_SIM_H_
#define ASIDE_BENCH_SIM_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/scenario/scenario.h"

namespace aside::bench {

// What a step measured. Latencies are of calls that arrived in the measured
// window; a call that timed out counts as the deadline, a fast failure (the
// sinkhole) counts only in `errors`.
struct StepResult {
  std::string policy;
  double load = 0;
  uint64_t calls = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double p999_ms = 0;
  // Failed calls (timeouts and the sinkhole's errors) / calls.
  double errors = 0;
  double timeouts = 0;
  // Most calls in service and queued on any backend at once.
  uint32_t max_rif = 0;
  // Max over backends of (its share of the calls) / (its share of the
  // capacity, averaged over the window).
  double max_share = 0;
  // Calls to the sinkhole / calls (all of the window is after its first
  // second: the warmup is longer).
  double sinkhole = 0;
  // Worst over the backends that recover in the window (the end of a
  // capacity drop, a stall or a warm-up): seconds until a 1 s window of its
  // calls first holds >= 0.8× its capacity share (-1: never, within the
  // step), and its share / capacity share over the 5 s after recovery.
  double recovery_s = 0;
  double recovered_share = 0;
  // Probes, load reports and table pushes, fleet-wide, per call.
  double extra_messages = 0;
  // Consecutive picks of one client that chose the same backend / picks.
  double same_backend = 0;
};

// Runs one load step of `scenario` with policy `name`: round_robin,
// weighted_round_robin (weights set to the capacities), random,
// p2c_pending, p2c_peak_ewma, least_time, orca_wrr (A58 weights from one
// ORCA stream per backend, pushed as tables), prequal, or "limit" (the
// perfect-information dispatcher); "name/key=value/..." sets parameters
// (bench/README.md, "Arena simulator"). Unimplemented for an unknown name.
absl::StatusOr<StepResult> RunStep(const Scenario& scenario,
                                   const std::string& name, double load);

}  // namespace aside::bench

#endif  // ASIDE_BENCH_SIM_SIM_H_
