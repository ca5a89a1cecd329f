// The balancing arena's processes (bench/arena/arena.cc): one executable,
// three roles. The coordinator starts the backends and, for every policy,
// an aside-server and the client processes, then reads what the clients
// recorded.
#ifndef ASIDE_BENCH_ARENA_ARENA_H_
#define ASIDE_BENCH_ARENA_ARENA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/scenario/scenario.h"

namespace aside::bench {

// The workload's method (any payload; the reply is the backend's index).
inline constexpr char kArenaMethod[] = "/aside.arena.Work/Call";
// The same, sent by the perfect-information dispatcher, which counts the
// call in the backend's `dispatched` (arena_shm.h) until it arrives.
inline constexpr char kArenaDispatchedMethod[] = "/aside.arena.Work/Dispatched";

// Factors applied to a scenario file: `time` multiplies its duration,
// warmup and event times, `service` its service times (dividing its
// capacity in calls per second, and so the calls per second of each load
// step).
struct ArenaScale {
  double time = 1;
  double service = 1;
};
absl::StatusOr<Scenario> LoadArenaScenario(const std::string& path,
                                           const ArenaScale& scale);

// `arena --role=backend`: serves backends [first, first + count) of the
// scenario (bench/arena/arena_backend.cc).
struct BackendRole {
  std::string scenario;
  ArenaScale scale;
  std::string shm;
  int first = 0;
  int count = 0;
  int64_t max_run_s = 3600;
};
int RunBackends(const BackendRole& role);

// `arena --role=client`: one open-loop client (bench/arena/arena_client.cc).
struct ClientRole {
  std::string scenario;
  ArenaScale scale;
  std::string shm;
  int index = 0;
  // "stub" (aside::Client on `group` of the server `target`), "limit" (the
  // perfect-information dispatcher), "grpc_round_robin" (a plain gRPC
  // channel over `addresses` with gRPC's round_robin).
  std::string mode;
  std::string target;
  std::string group;
  // Backend addresses in scenario order.
  std::vector<std::string> addresses;
  // This client's arrival rate per load step (calls per second).
  std::vector<double> rates;
  // Step timing: step k's warmup starts at run start + k × period.
  int64_t period_ns = 0;
  int64_t warmup_ns = 0;
  int64_t duration_ns = 0;
  int64_t deadline_ns = 0;
  uint64_t seed = 1;
  std::string out;
};
int RunClient(const ClientRole& role);

// One call as a client records it (binary, in the client's output file after
// an ArenaClientHeader).
struct ArenaRecord {
  int64_t intended_ns = 0;  // from the step's measurement start
  int64_t latency_ns = -1;  // completion minus intended; -1: never completed
  int32_t step = 0;
  int32_t backend = -1;  // -1: unknown
  int32_t ok = 0;
  int32_t pad = 0;
};

struct ArenaClientHeader {
  uint64_t records = 0;
  // Records that did not fit (should be 0).
  uint64_t dropped = 0;
  // The stub's Watch updates applied and load reports sent.
  uint64_t updates_applied = 0;
  uint64_t reports_sent = 0;
};

}  // namespace aside::bench

#endif  // ASIDE_BENCH_ARENA_ARENA_H_
