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
// Edges call Subscription::Confirm on their write or read completions with
// their own stream lock held, so nothing here may call back into an edge.
//
// Confirming is the fan-out's hot path (every Watch write completion, every
// ADS ACK, every grpclb list write), and a drain wait is rare. So Subscribe
// hands the edge a Subscription, and a confirmation is an atomic max on it;
// the mutex is taken only while a drain waits on the group, to tell the
// waiters the subscriber reached. No waiter misses it: a waiter counts
// itself in (AddWaiter) before it first looks (PendingCount), a Confirm
// stores before it reads that count, both sequentially consistent, so
// either the waiter sees the new generation or the Confirm sees the waiter.
#ifndef ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_
#define ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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
  // says something else it may depend on changed. It may also come when
  // nothing did (a subscriber that left went on confirming): it only asks
  // the waiter to look again.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    virtual uint64_t generation() const = 0;
    virtual void Changed() = 0;
  };

  // One subscriber's place in one group, handed out by Subscribe: the edge
  // keeps it per (stream, group) and confirms through it. The
  // DrainConfirmations must outlive every call to Confirm.
  class Subscription {
   public:
    // The subscriber has confirmed `generation` of the group (a lower one
    // than it already confirmed is ignored). Lock-free unless a drain waits
    // on the group; then the waiters whose generation it reached are told.
    // After Unsubscribe it counts for no wait (a waiter may still be told
    // to look again). Any thread, concurrently too.
    void Confirm(uint64_t generation);
    // The newest generation confirmed.
    uint64_t confirmed() const {
      return confirmed_.load(std::memory_order_seq_cst);
    }

   private:
    friend class DrainConfirmations;
    Subscription(DrainConfirmations* owner, std::string group, uint64_t id,
                 std::shared_ptr<const std::atomic<size_t>> waiting)
        : owner_(owner),
          group_(std::move(group)),
          id_(id),
          waiting_(std::move(waiting)) {}

    DrainConfirmations* const owner_;
    const std::string group_;
    const uint64_t id_;
    // The waiters on the group (GroupState::waiting): Confirm reads it
    // after storing `confirmed_`, and takes the mutex only when it is not 0.
    const std::shared_ptr<const std::atomic<size_t>> waiting_;
    std::atomic<uint64_t> confirmed_{0};
  };
  using SubscriptionPtr = std::shared_ptr<Subscription>;

  // A subscriber (a stream) subscribes to `group`: its place there, which
  // has confirmed nothing yet.
  SubscriptionPtr Subscribe(const std::string& group, Subscriber who);
  // `sub`'s subscriber left its group (no-op if it already did).
  void Unsubscribe(const Subscription& sub);

  // The subscribers of `group` that have not confirmed `generation`.
  std::vector<Pending> PendingFor(const std::string& group,
                                  uint64_t generation) const;
  // How many: what a waiter checks on every change (no copies).
  size_t PendingCount(const std::string& group, uint64_t generation) const;
  size_t subscribers(const std::string& group) const;

  // The waiter looks (PendingCount) once this returned: a confirmation it
  // does not see there is told to it by Changed().
  void AddWaiter(const std::string& group, std::shared_ptr<Waiter> waiter);
  void RemoveWaiter(const std::string& group, const Waiter* waiter);
  // Tells every waiter of `group` to look again (e.g. a load report came).
  void Touch(const std::string& group);

 private:
  struct Sub {
    Subscriber who;
    SubscriptionPtr handle;
  };
  struct GroupState {
    absl::flat_hash_map<uint64_t, Sub> subs;
    std::vector<std::shared_ptr<Waiter>> waiters;
    // waiters.size(), changed under mu_ and read without it by the group's
    // Subscriptions (which share it, so it outlives this state).
    std::shared_ptr<std::atomic<size_t>> waiting =
        std::make_shared<std::atomic<size_t>>(0);
  };
  // The waiters of `state` whose generation lies in (from, to].
  static void CollectLocked(const GroupState& state, uint64_t from, uint64_t to,
                            std::vector<std::shared_ptr<Waiter>>* out);
  void EraseIfEmptyLocked(const std::string& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Subscription of `group` went from `from` to `to` while the group had
  // waiters: tells those it reached.
  void Reached(const std::string& group, uint64_t from, uint64_t to)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Waiters registered: Touch (on every load report) costs nothing
  // without any.
  std::atomic<size_t> waiters_{0};
  // Guards the groups: who subscribes and who waits. A Subscription's
  // confirmed generation is its own atomic, read under mu_ by PendingFor
  // and PendingCount but stored without it (see the file comment).
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, GroupState> groups_ ABSL_GUARDED_BY(mu_);
  // The last subscriber's id (the key in GroupState::subs).
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_DRAIN_CONFIRMATIONS_H_
