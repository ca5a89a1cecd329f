// One Watch subscriber for the load tools (fanout_load, fanout_churn): a
// callback-API stream of one group that remembers when each generation
// arrived and what it received.
#ifndef ASIDE_BENCH_LOAD_WATCH_SUBSCRIBER_H_
#define ASIDE_BENCH_LOAD_WATCH_SUBSCRIBER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/sync.h"

namespace aside::bench {

// One Watch stream; remembers when each generation arrived.
class Subscriber final
    : public grpc::ClientReadReactor<aside::v1::GroupUpdate> {
 public:
  Subscriber(aside::v1::LoadBalancer::Stub* stub, const std::string& group) {
    request_.add_groups(group);
    stub->async()->Watch(&context_, &request_, this);
    StartRead(&update_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      return;
    }
    {
      aside::MutexLock lock(&mu_);
      arrivals_.emplace_back(update_.generation(),
                             std::chrono::steady_clock::now());
    }
    bytes_.store(update_.ByteSizeLong(), std::memory_order_relaxed);
    received_bytes_.fetch_add(update_.ByteSizeLong(),
                              std::memory_order_relaxed);
    received_.fetch_add(1, std::memory_order_relaxed);
    latest_.store(update_.generation(), std::memory_order_release);
    StartRead(&update_);
  }

  void OnDone(const grpc::Status& status) override {
    aside::MutexLock lock(&mu_);
    done_ = true;
    status_ = status;
  }

  uint64_t latest() const { return latest_.load(std::memory_order_acquire); }
  // Serialised size of the latest update.
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Updates received so far, and their serialised bytes.
  uint64_t received() const {
    return received_.load(std::memory_order_relaxed);
  }
  uint64_t received_bytes() const {
    return received_bytes_.load(std::memory_order_relaxed);
  }

  // When the first update at or past `generation` arrived.
  std::chrono::steady_clock::time_point ArrivalOf(uint64_t generation) {
    aside::MutexLock lock(&mu_);
    for (const auto& [g, t] : arrivals_) {
      if (g >= generation) {
        return t;
      }
    }
    return std::chrono::steady_clock::time_point::max();
  }

  // Every (generation, arrival) so far, in arrival order (generations only
  // grow on one stream).
  std::vector<std::pair<uint64_t, std::chrono::steady_clock::time_point>>
  Arrivals() {
    aside::MutexLock lock(&mu_);
    return arrivals_;
  }

  void Cancel() { context_.TryCancel(); }
  bool done() {
    aside::MutexLock lock(&mu_);
    return done_;
  }
  grpc::Status status() {
    aside::MutexLock lock(&mu_);
    return status_;
  }

 private:
  grpc::ClientContext context_;
  aside::v1::WatchRequest request_;
  aside::v1::GroupUpdate update_;
  std::atomic<uint64_t> latest_{0};
  std::atomic<size_t> bytes_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> received_bytes_{0};
  aside::Mutex mu_;
  std::vector<std::pair<uint64_t, std::chrono::steady_clock::time_point>>
      arrivals_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::bench

#endif  // ASIDE_BENCH_LOAD_WATCH_SUBSCRIBER_H_
