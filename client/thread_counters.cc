#include "client/thread_counters.h"

#include <algorithm>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"

namespace aside::client_internal {

namespace {

struct Registry {
  aside::Mutex mu;
  std::vector<ThreadCounterBlock*> blocks ABSL_GUARDED_BY(mu);
  // What exited threads counted.
  ThreadCounterBlock retired ABSL_GUARDED_BY(mu);
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  uint32_t next_slot ABSL_GUARDED_BY(mu) = 0;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed
  return *registry;
}

SlotCounters* Chunk(ThreadCounterBlock& block, uint32_t slot) {
  return block.chunks[slot >> kCounterChunkBits].load(
      std::memory_order_acquire);
}

SlotCounters* EnsureChunk(ThreadCounterBlock& block, uint32_t slot) {
  std::atomic<SlotCounters*>& cell = block.chunks[slot >> kCounterChunkBits];
  SlotCounters* chunk = cell.load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new SlotCounters[kCounterChunk];
    cell.store(chunk, std::memory_order_release);
  }
  return chunk;
}

void Zero(SlotCounters& c) {
  c.requests.store(0, std::memory_order_relaxed);
  c.failures.store(0, std::memory_order_relaxed);
  c.latency_sum_nanos.store(0, std::memory_order_relaxed);
  c.first_byte_gap_sum_nanos.store(0, std::memory_order_relaxed);
  c.started.store(0, std::memory_order_relaxed);
}

void AddInto(SlotCounters& to, const SlotCounters& from) {
  auto add = [](std::atomic<uint64_t>& a, const std::atomic<uint64_t>& b) {
    a.store(
        a.load(std::memory_order_relaxed) + b.load(std::memory_order_relaxed),
        std::memory_order_relaxed);
  };
  add(to.requests, from.requests);
  add(to.failures, from.failures);
  add(to.latency_sum_nanos, from.latency_sum_nanos);
  add(to.first_byte_gap_sum_nanos, from.first_byte_gap_sum_nanos);
  add(to.started, from.started);
}

// Folds the thread's block into the registry's retired block at thread
// exit.
thread_local bool t_counters_exited = false;
struct BlockOwner {
  bool armed = false;
  ~BlockOwner() {
    t_counters_exited = true;
    ThreadCounterBlock* block = t_counter_block;
    if (block == nullptr) {
      return;
    }
    t_counter_block = nullptr;
    Registry& r = GetRegistry();
    aside::MutexLock lock(&r.mu);
    r.blocks.erase(std::find(r.blocks.begin(), r.blocks.end(), block));
    for (uint32_t c = 0; c < kCounterChunks; ++c) {
      SlotCounters* chunk = block->chunks[c].load(std::memory_order_relaxed);
      if (chunk == nullptr) {
        continue;
      }
      SlotCounters* into = EnsureChunk(r.retired, c << kCounterChunkBits);
      for (uint32_t i = 0; i < kCounterChunk; ++i) {
        AddInto(into[i], chunk[i]);
      }
      delete[] chunk;
    }
    delete block;
  }
};
thread_local BlockOwner t_block_owner;

}  // namespace

SlotCounters* LocalCountersSlow(uint32_t slot) {
  if (t_counters_exited) {
    return nullptr;
  }
  if (t_counter_block == nullptr) {
    t_block_owner.armed = true;  // constructs it: it folds the block at exit
    auto* block = new ThreadCounterBlock();
    Registry& r = GetRegistry();
    aside::MutexLock lock(&r.mu);
    r.blocks.push_back(block);
    t_counter_block = block;
  }
  return EnsureChunk(*t_counter_block, slot) + (slot & (kCounterChunk - 1));
}

uint32_t AcquireCounterSlot() {
  Registry& r = GetRegistry();
  aside::MutexLock lock(&r.mu);
  if (!r.free_slots.empty()) {
    const uint32_t slot = r.free_slots.back();
    r.free_slots.pop_back();
    return slot;
  }
  if (r.next_slot >= kMaxCounterSlots) {
    return kNoCounterSlot;
  }
  return r.next_slot++;
}

void ReleaseCounterSlot(uint32_t slot) {
  if (slot == kNoCounterSlot) {
    return;
  }
  Registry& r = GetRegistry();
  aside::MutexLock lock(&r.mu);
  const uint32_t i = slot & (kCounterChunk - 1);
  for (ThreadCounterBlock* block : r.blocks) {
    if (SlotCounters* chunk = Chunk(*block, slot); chunk != nullptr) {
      Zero(chunk[i]);
    }
  }
  if (SlotCounters* chunk = Chunk(r.retired, slot); chunk != nullptr) {
    Zero(chunk[i]);
  }
  r.free_slots.push_back(slot);
}

CounterTotals SumCounterSlot(uint32_t slot) {
  CounterTotals t;
  if (slot == kNoCounterSlot) {
    return t;
  }
  Registry& r = GetRegistry();
  aside::MutexLock lock(&r.mu);
  const uint32_t i = slot & (kCounterChunk - 1);
  uint64_t started = 0;
  auto add = [&](const SlotCounters& c) {
    // The gap before the latencies it was taken from (acquire), and the
    // finished calls (requests) before the started ones.
    t.first_byte_gap_sum_nanos +=
        c.first_byte_gap_sum_nanos.load(std::memory_order_acquire);
    t.latency_sum_nanos += c.latency_sum_nanos.load(std::memory_order_relaxed);
    t.requests += c.requests.load(std::memory_order_relaxed);
    t.failures += c.failures.load(std::memory_order_relaxed);
  };
  for (ThreadCounterBlock* block : r.blocks) {
    if (SlotCounters* chunk = Chunk(*block, slot); chunk != nullptr) {
      add(chunk[i]);
    }
  }
  if (SlotCounters* chunk = Chunk(r.retired, slot); chunk != nullptr) {
    add(chunk[i]);
  }
  for (ThreadCounterBlock* block : r.blocks) {
    if (SlotCounters* chunk = Chunk(*block, slot); chunk != nullptr) {
      started += chunk[i].started.load(std::memory_order_relaxed);
    }
  }
  if (SlotCounters* chunk = Chunk(r.retired, slot); chunk != nullptr) {
    started += chunk[i].started.load(std::memory_order_relaxed);
  }
  t.in_flight = static_cast<int64_t>(started - t.requests);
  return t;
}

}  // namespace aside::client_internal
