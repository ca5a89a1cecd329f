// Tells groups' listeners (the protocol edges and the event log) of
// publications on one thread of its own, with no lock held.
//
// A publishing thread (an Admin write, the store's follower, a rebuild)
// swaps the group's table in, queues what its listeners have to hear, and
// posts the group here; it never runs a listener, so no listener ever runs
// under a group's, the registry's or the store's lock, and no lock order
// crosses from the groups into the edges. A group posted again before its
// turn is told once, everything it queued in order (Group::TellListeners).
//
// Cost: one hand-off per publication (a queue push and a wake-up); the
// listeners of one group are told in one pass. Listeners are cheap by
// contract (they note the change and start non-blocking work), so one
// thread keeps up with the server's publication rate.
//
// The registry's listeners of every group are told here too, in each
// group's turn (EveryGroupListeners).
//
// Thread rules: Post and AwaitIdle from any thread; mu_ guards the queue
// and the counters and is never held while a group is told.
#ifndef ASIDE_SERVER_GROUPS_GROUP_PUBLISHER_H_
#define ASIDE_SERVER_GROUPS_GROUP_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::server {

class Group;

class GroupPublisher {
 public:
  // Starts the thread (`aside-publish`).
  GroupPublisher();
  // Tells what is queued, then stops the thread.
  ~GroupPublisher();
  GroupPublisher(const GroupPublisher&) = delete;
  GroupPublisher& operator=(const GroupPublisher&) = delete;

  // Tells `group`'s listeners what it has queued, soon, on the thread.
  void Post(std::shared_ptr<Group> group);

  // Waits until the queue is empty and no group is being told, including
  // groups posted while one was (a listener that adds a group); true when
  // it was within `timeout`.
  bool AwaitIdle(absl::Duration timeout);

  // Whether the caller runs on the publisher's thread.
  bool OnThread() const {
    return std::this_thread::get_id() == thread_.get_id();
  }

 private:
  void Run();

  aside::Mutex mu_;
  std::deque<std::shared_ptr<Group>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t told_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_PUBLISHER_H_
