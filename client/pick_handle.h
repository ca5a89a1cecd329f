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
#include "lib/backend.h"
#include "lib/clock.h"
#include "lib/table.h"

namespace aside {

namespace client_internal {

// What the stub counts for one backend of one group: the load reports'
// cumulative counters. Written by PickHandle::Done on any thread (relaxed
// atomics), read by the reporter thread.
struct BackendStats {
  std::string address;
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> latency_sum_nanos{0};
  std::atomic<uint64_t> first_byte_sum_nanos{0};
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
};

// What a pick reads: immutable, published as one object.
struct GroupSnapshot {
  TableConstPtr table;  // null: no table and no fallback yet
  // Per table member (same index).
  std::vector<std::shared_ptr<BackendStats>> stats;
  bool fallback = false;
};

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
// read and a few relaxed atomics.
class PickHandle {
 public:
  PickHandle(PickHandle&& other) noexcept { *this = std::move(other); }
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

  // Marks the first response byte (a streaming call's first message): the
  // time to it feeds least_time `first_byte`. Only the first mark counts.
  // A call finished without a mark counts its completion as its first byte,
  // which is exact for unary calls.
  void FirstByte() noexcept;

  void Done(bool ok) noexcept;
  void Done(const absl::Status& status) noexcept { Done(status.ok()); }
  void Done(const grpc::Status& status) noexcept { Done(status.ok()); }

 private:
  friend class ClientGroup;
  PickHandle(std::shared_ptr<const client_internal::GroupSnapshot> keep,
             const Member* member, client_internal::BackendStats* stats,
             const Clock* clock, int64_t start_nanos) noexcept
      : keep_(std::move(keep)),
        member_(member),
        stats_(stats),
        clock_(clock),
        start_nanos_(start_nanos) {}
  void Record(bool ok, int64_t latency_nanos) noexcept;

  std::shared_ptr<const client_internal::GroupSnapshot> keep_;
  const Member* member_ = nullptr;
  client_internal::BackendStats* stats_ = nullptr;
  const Clock* clock_ = nullptr;
  int64_t start_nanos_ = 0;
  int64_t first_byte_nanos_ = -1;  // from start; -1 until FirstByte()
  bool done_ = false;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_PICK_HANDLE_H_
