// Internal: runs the probes of the registry's targets on one Boost.Asio
// io_context and its own thread (DESIGN.md §3). This is the glue between
// two pure parts and the network:
//
// - probe_scheduler.h decides when each target is probed (interval,
//   jitter, ticks, the concurrency cap, one probe per target in flight,
//   timeouts); the glue feeds it the monotonic time and carries out its
//   answers with one steady_timer.
// - probe_verdict.h turns a probe's outcome into healthy or not and the
//   reason.
// - Here, the probes themselves: `tcp` connects (and closes with RST, so
//   10 000 targets per second leave no TIME_WAIT sockets behind); `http`
//   sends "GET path HTTP/1.1" with Host, User-Agent, Accept and
//   "Connection: close" and reads the whole response through
//   beast::http::response_parser with a 16 KiB header limit and the spec's
//   body limit; `grpc` calls grpc.health.v1.Health/Check on one
//   grpc::Channel per target with the callback API (the result is posted
//   back to the io_context). Each probe ends at its timeout (the
//   scheduler's timeout closes the socket; gRPC uses the call deadline). A
//   black-hole target holds one slot for one timeout and never blocks the
//   thread.
// - Removal and shutdown close sockets and cancel gRPC calls; their handlers
//   run, see the target removed and drop the result. Everything a handler
//   touches is owned by shared pointers it holds.
//
// Thread-safety: Add, Remove, Post and Shutdown from any thread (except
// Shutdown from the prober thread); everything else, the scheduler and
// every probe's state included, runs on the prober thread only, so none of
// it needs a lock. grpc_mu_ guards the count of gRPC callbacks still
// running (they run on gRPC threads); thread_mu_ guards the thread handle
// for CpuTime and Shutdown. Cost per probe: a few heap operations and the
// socket system calls (or one gRPC unary call).
#ifndef ASIDE_SERVER_HEALTH_PROBER_H_
#define ASIDE_SERVER_HEALTH_PROBER_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/health/health_registry.h"
#include "server/health/target.h"

namespace aside::server::health_internal {

class Prober {
 public:
  // Receives every result of a target that is still registered, on the
  // prober thread. `result.latency` is set; `finished_at` is left to it.
  using ResultSink = std::function<void(Target&, ProbeResult)>;

  // grpc probes go through `relay` unless it is null.
  static absl::StatusOr<std::unique_ptr<Prober>> Create(
      uint32_t max_in_flight, uint64_t seed, const BackendRelay* relay,
      ResultSink sink);
  ~Prober();  // Shutdown()

  // Starts probing `target` (its kind is not none) at once; a target this
  // replica does not own (target->owned, fleet ownership) waits outside the
  // schedule instead, costing nothing, until OwnershipChanged.
  void Add(std::shared_ptr<Target> target);
  // `target->owned` of the target changed: one no longer owned leaves the
  // schedule (after its probe in flight, if any); one now owned is due at
  // once.
  void OwnershipChanged(uint64_t target_id);
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
