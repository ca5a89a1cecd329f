// The project's one mutex: aside::Mutex and its scoped aside::MutexLock,
// with the shape of absl::Mutex/absl::MutexLock (Lock, Unlock, Await,
// AwaitWithTimeout, plus AwaitUntil for a steady-clock deadline), built on
// std::mutex. It replaces std::condition_variable too: a waiter states the
// condition it waits for, and every release of the mutex (an Unlock, or a
// wait) re-evaluates the conditions of the waiters, so there is no notify
// to forget. Use it (not std::mutex, not
// absl::Mutex) for shared state, with ABSL_GUARDED_BY on the state and
// ABSL_EXCLUSIVE_LOCKS_REQUIRED on the methods that need the lock held.
//
// Why not absl::Mutex: Debian's abseil is not built with ThreadSanitizer,
// so TSan cannot see absl::Mutex's happens-before edges and reports false
// races on everything it guards. std::mutex goes through pthread, which TSan
// intercepts, so TSan sees this one.
//
// Mutex is a capability for clang's thread-safety analysis, which checks
// the annotations over every translation unit (`make thread-safety`). A
// condition passed to Await runs with the lock held, which the analysis
// cannot see through a lambda: pass aside::Cond(&flag), or call
// AssertHeld() first thing in the lambda.
#ifndef ASIDE_LIB_SYNC_H_
#define ASIDE_LIB_SYNC_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace aside {

// ABSL_LOCKABLE is clang's capability("mutex") (and nothing for GCC).
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    // Waiters register while holding the mutex, so this read cannot miss
    // one that is about to wait. The notification goes out before the
    // unlock: a woken waiter cannot return from Await until it gets the
    // mutex, so nothing here touches this object after a waiter may have
    // destroyed it (a waiter that owns the Mutex, such as a completion
    // flag on its stack, may free it as soon as its condition holds).
    NotifyWaiters();
    mu_.unlock();
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }

  // Tells the analysis that the calling thread holds the lock (no check at
  // run time): for lambdas that run under it, such as Await conditions.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // With the mutex held: waits until `condition()` is true. The condition is
  // re-evaluated each time another thread releases the mutex.
  template <typename Condition>
  void Await(Condition condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    NotifyWaiters();
    waiters_.fetch_add(1, std::memory_order_relaxed);
    changed_.wait(lock, condition);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    lock.release();
  }

  // Same, for at most `timeout`; returns whether the condition holds.
  template <typename Condition>
  bool AwaitWithTimeout(Condition condition, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    NotifyWaiters();
    waiters_.fetch_add(1, std::memory_order_relaxed);
    const bool ok = changed_.wait_for(
        lock,
        absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())),
        condition);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    lock.release();
    return ok;
  }

  // Same, until `deadline` on the steady clock (for loops that sleep until
  // the next of several due times, and must not drift by recomputing a
  // timeout); returns whether the condition holds.
  template <typename Condition>
  bool AwaitUntil(Condition condition,
                  std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    NotifyWaiters();
    waiters_.fetch_add(1, std::memory_order_relaxed);
    const bool ok = changed_.wait_until(lock, deadline, condition);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    lock.release();
    return ok;
  }

 private:
  // Before the mutex is released, by Unlock or by a wait: the releasing
  // thread may have changed what other waiters wait for (a thread that
  // updates state and then waits releases the mutex in the wait, not in
  // Unlock).
  void NotifyWaiters() {
    if (waiters_.load(std::memory_order_relaxed) > 0) {
      changed_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::atomic<int> waiters_{0};
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Adapts what absl::Condition took: a pointer to a flag, or to a callable.
inline auto Cond(const bool* flag) {
  return [flag] { return *flag; };
}
inline auto Cond(bool* flag) {
  return [flag] { return *flag; };
}
// A callable may be annotated ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu): Await
// calls it with the lock held, which the analysis cannot follow into the
// wrapper.
template <typename Callable>
auto Cond(Callable* callable) {
  return [callable]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return (*callable)(); };
}

}  // namespace aside

#endif  // ASIDE_LIB_SYNC_H_
