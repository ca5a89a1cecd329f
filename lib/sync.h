// A mutex and a scoped lock with the shape of absl::Mutex/absl::MutexLock
// (Lock, Unlock, Await, AwaitWithTimeout), built on std::mutex.
//
// Why not absl::Mutex: Debian's abseil is not built with ThreadSanitizer,
// so TSan cannot see absl::Mutex's happens-before edges and reports false
// races on everything it guards. std::mutex goes through pthread, which TSan
// intercepts. The thread-safety annotations stay, for documentation and for
// compilers that check them.
#ifndef ASIDE_LIB_SYNC_H_
#define ASIDE_LIB_SYNC_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace aside {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    // Waiters register while holding the mutex, so this read cannot miss
    // one that is about to wait.
    const bool wake = waiters_.load(std::memory_order_relaxed) > 0;
    mu_.unlock();
    if (wake) {
      changed_.notify_all();
    }
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

  // With the mutex held: waits until `condition()` is true. The condition is
  // re-evaluated each time another thread releases the mutex.
  template <typename Condition>
  void Await(Condition condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
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
    waiters_.fetch_add(1, std::memory_order_relaxed);
    const bool ok = changed_.wait_for(
        lock, absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())),
        condition);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    lock.release();
    return ok;
  }

 private:
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
template <typename Callable>
auto Cond(Callable* callable) {
  return [callable] { return (*callable)(); };
}

}  // namespace aside

#endif  // ASIDE_LIB_SYNC_H_
