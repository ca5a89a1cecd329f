// aside::PickHandle: what ClientGroup::Pick returns, the backend to call,
// and the per-backend counters it records into (shared with the load
// reporter).
#ifndef ASIDE_CLIENT_PICK_HANDLE_H_
#define ASIDE_CLIENT_PICK_HANDLE_H_

#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/pick_clock.h"
#include "client/thread_counters.h"
#include "lib/backend.h"
#include "lib/clock.h"
#include "lib/load/orca_weight.h"
#include "lib/sync.h"
#include "lib/table.h"

namespace aside {

namespace client_internal {

// What the stub counts for one backend of one group: the load reports'
// cumulative counters. Written by PickHandle::Done on any thread, into
// that thread's own counters for `slot` (thread_counters.h: no locked
// instruction), or into the shared atomics below when the slot is
// kNoCounterSlot or the thread is exiting; read by the reporter thread
// (Totals()).
struct BackendStats {
  BackendStats() = default;
  BackendStats(const BackendStats&) = delete;
  BackendStats& operator=(const BackendStats&) = delete;
  ~BackendStats() { ReleaseCounterSlot(slot); }

  // The per-thread counters plus the shared ones.
  CounterTotals Totals() const;

  std::string address;
  const uint32_t slot = AcquireCounterSlot();
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> latency_sum_nanos{0};
  // Sum over calls marked with FirstByte() of (latency - first byte): the
  // first-byte sum is latency_sum_nanos minus this, so an unmarked call (a
  // unary one, whose completion is its first byte) adds nothing here.
  // Added with release after latency_sum_nanos, read with acquire before
  // it (the load reporter), so the difference is never negative.
  std::atomic<uint64_t> first_byte_gap_sum_nanos{0};
  // Calls picked (in flight: started - requests).
  std::atomic<uint64_t> started{0};
  std::atomic<uint32_t> consecutive_failures{0};
  // Local ejection (ClientOptions): the time on the client's Clock
  // (ClientOptions::clock, in its NowNanos() units) until which picks avoid
  // the backend (0: not ejected), and the settings, fixed at creation.
  std::atomic<int64_t> ejected_until_nanos{0};
  uint32_t eject_after_failures = 0;
  int64_t eject_nanos = 0;
  // Reporter thread: requests at the last report; whether the next report
  // must set `reset` (counters restarted).
  std::atomic<uint64_t> reported_requests{0};
  bool reset_pending = true;
  // The backend's last per-call load report (ORCA trailer) and how many
  // were recorded, written by PickHandle::RecordBackendMetrics on any
  // thread, read by the reporter thread. A mutex, not atomics: a report's
  // fields stay together, and only calls that carry a report take it.
  mutable aside::Mutex orca_mu;
  OrcaLoad orca ABSL_GUARDED_BY(orca_mu);
  uint64_t orca_reports ABSL_GUARDED_BY(orca_mu) = 0;
  // Reporter thread: orca_reports at the last report sent.
  uint64_t reported_orca = 0;
};

// What a pick reads: immutable, published as one object.
struct GroupSnapshot {
  TableConstPtr table;  // null: no table and no fallback yet
  // Whether the table's policy picks by latency estimates (p2c peak_ewma,
  // least_time) and by in-flight counts (p2c), its child's for sticky and
  // locality.
  bool reads_latency = false;
  bool reads_in_flight = false;
  // Per table member (same index).
  std::vector<std::shared_ptr<BackendStats>> stats;
  bool fallback = false;
  // The table was read from the table cache (ClientOptions::cache_dir),
  // not received from a server since the stub started.
  bool from_cache = false;
};

// One thread's reference to one snapshot, shared by the PickHandles that
// thread picked from it, so that a pick and its handle keep the snapshot
// alive without a locked instruction on the usual path (biased reference
// counting): the owning thread counts the handles it hands out and the
// ones released on it in plain fields only it touches; a handle released
// on another thread, or after the owner retired the hold (it saw a newer
// snapshot, or exited), counts down `pending` atomically. Retiring adds
// what the owner still sees outstanding to `pending`, so `pending` then
// holds the handles really outstanding, and whoever brings it to zero
// deletes the hold. Before retirement `pending` is zero or negative (the
// remote releases so far), so no release can reach zero early.
struct SnapshotHold {
  SnapshotHold(std::shared_ptr<const GroupSnapshot> s, uint64_t owner)
      : snapshot(std::move(s)), owner_thread(owner) {}
  const std::shared_ptr<const GroupSnapshot> snapshot;
  const uint64_t owner_thread;  // CurrentThreadId() of the owner
  // Owner thread only.
  uint64_t taken = 0;
  uint64_t returned = 0;
  bool retired = false;
  // Any thread.
  std::atomic<int64_t> pending{0};
};

// A number for the calling thread, unique for the process's lifetime
// (never 0).
uint64_t CurrentThreadId() noexcept;
// Releases one handle's reference (any thread).
void ReleaseHold(SnapshotHold* hold) noexcept;
// The owner stops handing out references from `hold` (deleted once the
// last handle is released, at once if none is outstanding).
void RetireHold(SnapshotHold* hold) noexcept;

}  // namespace client_internal

// The result of a pick: the backend to call. Call Done() when the call
// finishes; it records the outcome and latency into the backend's load
// (in-flight count, the policies' load models) and the next load report.
// If a PickHandle is destroyed without Done(), the destructor records the call
// as a failure ("abandoned": an early return or an exception path did not
// succeed) with the time elapsed so far, so the in-flight count never
// leaks. Move-only; the table it came from stays alive while it exists, so
// address(), locality() and metadata() stay valid, after Done() too. Done()
// records once; later calls do nothing. One thread uses a PickHandle at a time,
// any thread (an async completion) may call Done(); Done costs a clock
// read (RDTSC where the TSC is safe, pick_clock.h) and, for a policy that
// reads neither in-flight counts nor latency estimates, no locked
// instruction: the report's counts (calls started and finished, failures,
// latency sums) go to the calling thread's own counters
// (thread_counters.h). A policy that reads in-flight counts (p2c) also
// keeps them in the member's BackendLoad, which is then exact at every
// pick; otherwise BackendLoad's counts do not include the stub's calls
// (the load report's do).
class PickHandle {
 public:
  PickHandle(PickHandle&& other) noexcept
      : hold_(other.hold_),
        member_(other.member_),
        stats_(other.stats_),
        clock_(other.clock_),
        start_nanos_(other.start_nanos_),
        first_byte_nanos_(other.first_byte_nanos_),
        exact_start_(other.exact_start_),
        shared_in_flight_(other.shared_in_flight_),
        done_(other.done_) {
    other.hold_ = nullptr;
    other.member_ = nullptr;
    other.done_ = true;
  }
  PickHandle& operator=(PickHandle&& other) noexcept;
  PickHandle(const PickHandle&) = delete;
  PickHandle& operator=(const PickHandle&) = delete;
  ~PickHandle();

  absl::string_view address() const { return member_->backend.address; }
  const Locality& locality() const { return member_->backend.locality; }
  const std::map<std::string, std::string, std::less<>>& metadata() const {
    return member_->backend.metadata;
  }
  const Member& member() const { return *member_; }
  // Generation of the table picked from (0 for the fallback list).
  uint64_t generation() const;
  // True when the pick came from the static fallback list.
  bool from_fallback() const;
  // True when the pick came from a table read from the table cache
  // (ClientOptions::cache_dir), before any server's table arrived.
  bool from_cache() const;

  // Marks the first response byte (a streaming call's first message): the
  // time to it feeds least_time `first_byte`. Only the first mark counts.
  // A call finished without a mark counts its completion as its first byte,
  // which is exact for unary calls.
  void FirstByte() noexcept;

  void Done(bool ok) noexcept;
  void Done(const absl::Status& status) noexcept { Done(status.ok()); }
  void Done(const grpc::Status& status) noexcept { Done(status.ok()); }
  // Records the backend's per-call load report (ORCA, gRFC A51): a
  // serialised xds.data.orca.v3.OrcaLoadReport, the value of the
  // `endpoint-load-metrics-bin` trailer a gRPC backend sends when its
  // handler records metrics (C++'s CallMetricRecorder, grpc-js's
  // PerRequestMetricRecorder), decoded (not base64). gRPC C++'s core keeps
  // that trailer for its own load-balancing policies and does not show it
  // to the application (ClientContext, interceptors): a C++ caller gets the
  // bytes only where the backend also returns them in a form the
  // application sees (docs/operations.md, "ORCA"). The backend's last report
  // goes with the next load report (BackendLoad.utilization: CPU and
  // application utilisation, qps and eps as reported), where the server
  // turns it into weights for groups with `orca: {weights: true}` and into
  // the locality policy's utilisation. Named metrics "rif" (requests in
  // flight at the backend) and "latency_ms" (its latency estimate) go to
  // the prequal policy at once (BackendLoad::Report). Returns false,
  // recording nothing, for a malformed report or one whose utilisation is
  // outside 0..10.
  // Costs a parse of the few bytes and an uncontended lock; any thread,
  // before or after Done (the handle must still exist).
  bool RecordBackendMetrics(absl::string_view serialized) noexcept;

 private:
  friend class ClientGroup;
  PickHandle(client_internal::SnapshotHold* hold, const Member* member,
             client_internal::BackendStats* stats, const Clock* clock,
             int64_t start_nanos, bool exact_start,
             bool shared_in_flight) noexcept
      : hold_(hold),
        member_(member),
        stats_(stats),
        clock_(clock),
        start_nanos_(start_nanos),
        exact_start_(exact_start),
        shared_in_flight_(shared_in_flight) {}
  // Now on the client's clock (null: the system clock, read exactly: the
  // TSC where it is safe).
  int64_t Now() const noexcept {
    if (clock_ != nullptr) [[unlikely]] {
      return clock_->NowNanos();
    }
    return client_internal::g_pick_tsc.usable ? client_internal::TscNanos()
                                              : client_internal::ExactNanos();
  }
  void Record(bool ok, int64_t latency_nanos) noexcept;

  // Keeps the snapshot (and the table member_ points into) alive.
  client_internal::SnapshotHold* hold_ = nullptr;
  const Member* member_ = nullptr;
  client_internal::BackendStats* stats_ = nullptr;
  const Clock* clock_ = nullptr;  // null: the system clock
  int64_t start_nanos_ = 0;
  int64_t first_byte_nanos_ = -1;  // from start; -1 until FirstByte()
  // Whether the call feeds the member's latency estimates: its policy
  // reads them, or the client runs on an injected clock (a start stamp
  // that may be a lower bound, pick_clock.h, never does).
  bool exact_start_ = true;
  // Whether the pick also counted the call in the member's BackendLoad
  // (its policy reads in-flight counts).
  bool shared_in_flight_ = true;
  bool done_ = false;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_PICK_HANDLE_H_
