// Mutable per-backend load state, kept outside the immutable tables so that
// it survives rebuilds. Every operation is a few relaxed atomics: no locks,
// no allocation.
#ifndef ASIDE_LIB_LOAD_BACKEND_LOAD_H_
#define ASIDE_LIB_LOAD_BACKEND_LOAD_H_

#include <atomic>
#include <cstdint>

namespace aside {

// Load of one backend of one group as seen by one process (a stub, or the
// server, which also merges reports from every stub into it).
class BackendLoad {
 public:
  BackendLoad() = default;
  BackendLoad(const BackendLoad&) = delete;
  BackendLoad& operator=(const BackendLoad&) = delete;

  // A request to the backend started.
  void Start() noexcept { in_flight_.fetch_add(1, std::memory_order_relaxed); }

  // A request started with Start() finished. Latencies are in nanoseconds;
  // `first_byte_nanos` < 0 means unknown.
  void Finish(bool ok) noexcept {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (!ok) {
      failures_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  int64_t in_flight() const noexcept {
    return in_flight_.load(std::memory_order_relaxed);
  }
  uint64_t requests() const noexcept {
    return requests_.load(std::memory_order_relaxed);
  }
  uint64_t failures() const noexcept {
    return failures_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace aside

#endif  // ASIDE_LIB_LOAD_BACKEND_LOAD_H_
