// Which generation of each group every subscriber on this replica has
// confirmed, whatever edge it came by, and the drain waits
// (Admin.WaitDrained) that read it.
//
// What "confirmed generation G" means per edge (each edge reports here):
// - Watch (WatchConfirmed): the stub answered Applied for an update at >= G
//   that had `confirm` set; updates without it (nothing taken out) count
//   once written, provided every earlier one with `confirm` was answered.
// - Watch (the older server-streaming method): the write of an update at
//   >= G completed. gRPC then handed it to the transport; the stub applies
//   it as it reads, so this is the closest an old stub gets to confirming.
// - xDS (ADS): the stream ACKed a ClusterLoadAssignment built from the
//   group's table at >= G (or one with the same content). A NACK confirms
//   nothing.
// - grpclb: the write of a server list built at >= G (or one with the same
//   content) completed.
//
// Thread-safe: every method may be called from any thread; one mutex,
// never held while calling out (waiters are told after it is released).
// Edges call Confirm on their write or read completions with their own
// stream lock held, so nothing here may call back into an edge.
#ifndef ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_
#define ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "lib/sync.h"

namespace aside::server {

class DrainConfirmations {
 public:
  enum class Edge { kWatch, kXds, kGrpclb };
  // "watch", "xds", "grpclb".
  static const char* EdgeName(Edge edge);

  struct Subscriber {
    Edge edge = Edge::kWatch;
    // What the subscriber calls itself (Watch's subscriber, the xDS node
    // id); may be empty.
    std::string name;
    // Its stream's peer address.
    std::string peer;
  };

  struct Pending {
    Subscriber who;
    uint64_t confirmed = 0;
  };

  // A drain wait on one group. Changed() is called (without any lock of
  // this class held, possibly after RemoveWaiter, from any thread) when a
  // subscriber of the group reached `generation()` or left, or when Touch
  // says something else it may depend on changed.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    virtual uint64_t generation() const = 0;
    virtual void Changed() = 0;
  };

  // A fresh id for one subscriber (a stream): unique for the process.
  uint64_t NewId() { return next_id_.fetch_add(1) + 1; }

  // `id` subscribes to `group` (again: keeps what it confirmed).
  void Subscribe(const std::string& group, uint64_t id, Subscriber who);
  // `id` left `group` (no-op if it was not subscribed).
  void Unsubscribe(const std::string& group, uint64_t id);
  // `id` has confirmed `generation` of `group` (a lower one than it already
  // confirmed is ignored; so is an id not subscribed).
  void Confirm(const std::string& group, uint64_t id, uint64_t generation);

  // The subscribers of `group` that have not confirmed `generation`.
  std::vector<Pending> PendingFor(const std::string& group,
                                  uint64_t generation) const;
  // How many: what a waiter checks on every change (no copies).
  size_t PendingCount(const std::string& group, uint64_t generation) const;
  size_t subscribers(const std::string& group) const;

  void AddWaiter(const std::string& group, std::shared_ptr<Waiter> waiter);
  void RemoveWaiter(const std::string& group, const Waiter* waiter);
  // Tells every waiter of `group` to look again (e.g. a load report came).
  void Touch(const std::string& group);

 private:
  struct Sub {
    Subscriber who;
    uint64_t confirmed = 0;
  };
  struct GroupState {
    absl::flat_hash_map<uint64_t, Sub> subs;
    std::vector<std::shared_ptr<Waiter>> waiters;
  };
  // The waiters of `state` whose generation lies in (from, to].
  static void CollectLocked(const GroupState& state, uint64_t from, uint64_t to,
                            std::vector<std::shared_ptr<Waiter>>* out);
  void EraseIfEmptyLocked(const std::string& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<uint64_t> next_id_{0};
  // Waiters registered: Touch (on every load report) costs nothing
  // without any.
  std::atomic<size_t> waiters_{0};
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_
