// Per-thread counters for the stub's per-backend load reports, so that a
// pick and its Done count without a locked instruction.
//
// Every BackendStats takes a slot number (CounterSlot). Each thread that
// counts owns a block of counters indexed by slot and is the only writer
// of its block: an increment is a relaxed load and store (no lock prefix).
// A reader (the load reporter) sums the slot over every thread's block,
// plus what exited threads left (folded into a shared block when they
// exit). A slot is released when its BackendStats is destroyed, which
// happens only once no handle can count into it; its counters are zeroed
// then, so the next owner starts from zero.
//
// Slots beyond kMaxCounterSlots (a million live backends per process) are
// not handed out (kNoCounterSlot); their BackendStats count with shared
// atomics instead.
#ifndef ASIDE_CLIENT_THREAD_COUNTERS_H_
#define ASIDE_CLIENT_THREAD_COUNTERS_H_

#include <atomic>
#include <cstdint>

namespace aside::client_internal {

// One slot's counters in one thread's block.
struct SlotCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> latency_sum_nanos{0};
  // See BackendStats::first_byte_gap_sum_nanos: stored with release after
  // latency_sum_nanos, read with acquire before it.
  std::atomic<uint64_t> first_byte_gap_sum_nanos{0};
  // Calls picked: in flight, started - requests.
  std::atomic<uint64_t> started{0};
};

// Sums of one slot over every thread.
struct CounterTotals {
  uint64_t requests = 0;
  uint64_t failures = 0;
  uint64_t latency_sum_nanos = 0;
  uint64_t first_byte_gap_sum_nanos = 0;
  int64_t in_flight = 0;  // started - requests
};

inline constexpr uint32_t kCounterChunkBits = 10;
inline constexpr uint32_t kCounterChunk = 1u << kCounterChunkBits;
inline constexpr uint32_t kCounterChunks = 1024;
inline constexpr uint32_t kMaxCounterSlots = kCounterChunk * kCounterChunks;
inline constexpr uint32_t kNoCounterSlot = ~0u;

// A free slot (kNoCounterSlot when all are taken), its counters zero.
uint32_t AcquireCounterSlot();
// Zeroes the slot everywhere and frees it. No thread may count into it
// any more.
void ReleaseCounterSlot(uint32_t slot);
// The slot's sums over every thread.
CounterTotals SumCounterSlot(uint32_t slot);

// One thread's block: chunks of kCounterChunk slots, allocated on first
// use and never moved while the thread lives.
struct ThreadCounterBlock {
  std::atomic<SlotCounters*> chunks[kCounterChunks] = {};
};

// The calling thread's block (null once it has been folded at thread
// exit), and the slow path that creates it or a chunk of it.
inline thread_local ThreadCounterBlock* t_counter_block = nullptr;
SlotCounters* LocalCountersSlow(uint32_t slot);

// The calling thread's counters for `slot` (not kNoCounterSlot); null
// after the thread's block was folded at its exit.
inline SlotCounters* LocalCounters(uint32_t slot) noexcept {
  if (ThreadCounterBlock* block = t_counter_block; block != nullptr)
      [[likely]] {
    SlotCounters* chunk = block->chunks[slot >> kCounterChunkBits].load(
        std::memory_order_relaxed);
    if (chunk != nullptr) [[likely]] {
      return chunk + (slot & (kCounterChunk - 1));
    }
  }
  return LocalCountersSlow(slot);
}

// Adds `n` to a counter only this thread writes.
inline void OwnAdd(std::atomic<uint64_t>& counter, uint64_t n,
                   std::memory_order order = std::memory_order_relaxed) {
  counter.store(counter.load(std::memory_order_relaxed) + n, order);
}

}  // namespace aside::client_internal

#endif  // ASIDE_CLIENT_THREAD_COUNTERS_H_
