// Internal: runs the probes of the registry's targets on one Boost.Asio
// io_context and its own thread (DESIGN.md §3).
//
// - Scheduling: one steady_timer drives a calendar of probe start times
//   (a map from due tick to the targets due then, in the order they were
//   scheduled) and one FIFO of probe timeouts per timeout value (probes with
//   equal timeouts expire in start order, so O(1) per probe). All times are
//   rounded up to ticks of interval / 100 (1..10 ms): targets due together
//   start in one batch on one wake-up, and a 1 s interval has only ~100
//   live ticks. Entries are cancelled lazily by sequence number. A new target is probed at once;
//   the next probe of a target is due interval x (1 +/- jitter) after the
//   start of the previous one, and never before that one finished: at most
//   one probe per target is in flight.
// - Concurrency: at most `max_in_flight` probes at once; probes due beyond
//   that wait in one FIFO queue (fair: in the order they became due).
// - Probes: `tcp` connects (and closes with RST, so 10 000 targets per
//   second leave no TIME_WAIT sockets behind); `http` sends
//   "GET path HTTP/1.1" with Host and "Connection: close" and reads the
//   whole response through beast::http::response_parser with a 16 KiB header
//   limit and the spec's body limit; `grpc` calls grpc.health.v1.Health/Check
//   on one grpc::Channel per target with the callback API (the result is
//   posted back to the io_context). Each probe ends at its timeout (a timer
//   closes the socket; gRPC uses the call deadline). A black-hole target
//   holds one slot for one timeout and never blocks the thread.
// - Removal and shutdown close sockets and cancel gRPC calls; their handlers
//   run, see the target removed and drop the result. Everything a handler
//   touches is owned by shared pointers it holds.
//
// Thread-safety: Add, Remove, Post and Shutdown from any thread (except
// Shutdown from the prober thread); everything else runs on the prober
// thread. Cost per probe: a few heap operations and the socket system calls
// (or one gRPC unary call).
#ifndef ASIDE_SERVER_HEALTH_PROBER_H_
#define ASIDE_SERVER_HEALTH_PROBER_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/health/health_registry.h"
#include "server/health/target.h"

namespace aside::server::health_internal {

// Largest HTTP response header accepted from a backend.
inline constexpr uint32_t kHttpHeaderLimit = 16 * 1024;
// Largest gRPC health response accepted from a backend.
inline constexpr int kGrpcMaxResponseBytes = 4 * 1024;

class Prober {
 public:
  // Receives every result of a target that is still registered, on the
  // prober thread. `result.latency` is set; `finished_at` is left to it.
  using ResultSink = std::function<void(Target&, ProbeResult)>;

  static absl::StatusOr<std::unique_ptr<Prober>> Create(
      uint32_t max_in_flight, uint64_t seed, ResultSink sink);
  ~Prober();  // Shutdown()

  // Starts probing `target` (its kind is not none) at once.
  void Add(std::shared_ptr<Target> target);
  // Stops probing the target; a probe in flight is cancelled.
  void Remove(uint64_t target_id);
  // Runs `fn` on the prober thread.
  void Post(std::function<void()> fn);
  // Cancels everything, waits for gRPC calls in flight to complete and
  // joins the thread. Idempotent.
  void Shutdown();
  absl::Duration CpuTime() const;

  class Impl;

 private:
  explicit Prober(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_PROBER_H_
