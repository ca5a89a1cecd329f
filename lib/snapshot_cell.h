// Publication of immutable snapshots: one writer publishes, many readers
// acquire and keep what they acquired alive for as long as they use it.
#ifndef ASIDE_LIB_SNAPSHOT_CELL_H_
#define ASIDE_LIB_SNAPSHOT_CELL_H_

#include <atomic>
#include <memory>

namespace aside {

// Thread-safe. Acquire() is wait-free for readers in practice (libstdc++'s
// atomic<shared_ptr> uses a per-object spin bit held for a few instructions).
template <typename T>
class SnapshotCell {
 public:
  SnapshotCell() = default;
  explicit SnapshotCell(std::shared_ptr<const T> initial)
      : cell_(std::move(initial)) {}

  void Publish(std::shared_ptr<const T> next) {
    cell_.store(std::move(next), std::memory_order_release);
  }
  std::shared_ptr<const T> Acquire() const {
    return cell_.load(std::memory_order_acquire);
  }

 private:
  std::atomic<std::shared_ptr<const T>> cell_;
};

}  // namespace aside

#endif  // ASIDE_LIB_SNAPSHOT_CELL_H_
