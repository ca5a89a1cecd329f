// Publication of immutable snapshots: one writer publishes, many readers
// acquire and keep what they acquired alive for as long as they use it.
#ifndef ASIDE_LIB_SNAPSHOT_CELL_H_
#define ASIDE_LIB_SNAPSHOT_CELL_H_

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

namespace aside {

// Thread-safe. Acquire() and Publish() hold a spin bit for the few
// instructions of a shared_ptr copy or swap (the previous snapshot is
// released after the bit is cleared), so a reader waits at most for another
// reader's copy or a writer's swap; it yields the CPU if the holder was
// preempted. This is what libstdc++ 12's atomic<shared_ptr> does, except
// that its load() clears the bit with a relaxed store, which does not order
// a reader's copy before the next writer's swap (ThreadSanitizer reports
// it); here every unlock is a release. Built on std::atomic only, so
// ThreadSanitizer sees the synchronisation (Debian's abseil is not
// instrumented).
template <typename T>
class SnapshotCell {
 public:
  SnapshotCell() = default;
  explicit SnapshotCell(std::shared_ptr<const T> initial)
      : cell_(std::move(initial)) {}

  void Publish(std::shared_ptr<const T> next) {
    Lock();
    cell_.swap(next);
    Unlock();
    // `next` now holds the previous snapshot, dropped after unlocking.
  }
  std::shared_ptr<const T> Acquire() const {
    Lock();
    std::shared_ptr<const T> copy = cell_;
    Unlock();
    return copy;
  }

 private:
  void Lock() const noexcept {
    int spins = 0;
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();  // the holder was preempted
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
    }
  }
  void Unlock() const noexcept {
    locked_.store(false, std::memory_order_release);
  }

  mutable std::atomic<bool> locked_{false};
  std::shared_ptr<const T> cell_;
};

}  // namespace aside

#endif  // ASIDE_LIB_SNAPSHOT_CELL_H_
