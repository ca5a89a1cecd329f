// What every streaming service shares (Watch, grpclb, xDS ADS and LRS, the
// fleet's LoadView): the set of its open streams and a ticker.
//
// StreamSet<Stream> holds the open streams: a stream adds itself when it
// starts and removes itself in OnDone; once the service shuts down, Add
// refuses (the stream then finishes itself, UNAVAILABLE) and every open
// stream is told (Stream::Shutdown()). ForEach visits them under the set's
// lock. Lock order: the set's lock is taken before a stream's own
// (Shutdown and ForEach call into streams with it held), so a stream never
// calls the set while holding its own lock.
//
// Ticker is a named thread that runs a function every interval until it is
// stopped (its destructor stops it and waits for a run in progress), and
// also soon after Wake() (one run for any number of wakes before it
// starts), off the waking thread.
//
// Thread-safe; each costs one mutex. O(streams) per Shutdown and ForEach.
#ifndef ASIDE_SERVER_BASE_STREAM_SET_H_
#define ASIDE_SERVER_BASE_STREAM_SET_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "lib/thread_name.h"

namespace aside::server {

template <typename Stream>
class StreamSet {
 public:
  // Adds `s`; false (and not added) once Shutdown has begun.
  bool Add(Stream* s) {
    aside::MutexLock lock(&mu_);
    if (shutting_down_) {
      return false;
    }
    streams_.insert(s);
    return true;
  }
  // Removes `s` (a stream not in the set is ignored); how many remain.
  size_t Remove(Stream* s) {
    aside::MutexLock lock(&mu_);
    streams_.erase(s);
    return streams_.size();
  }
  // Refuses new streams and calls Shutdown() on each open one. Idempotent.
  void Shutdown() {
    aside::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (Stream* s : streams_) {
      s->Shutdown();
    }
  }
  size_t size() const {
    aside::MutexLock lock(&mu_);
    return streams_.size();
  }
  bool shutting_down() const {
    aside::MutexLock lock(&mu_);
    return shutting_down_;
  }
  // Calls fn(Stream*) on each open stream, with the set's lock held.
  template <typename Fn>
  void ForEach(Fn fn) const {
    aside::MutexLock lock(&mu_);
    for (Stream* s : streams_) {
      fn(s);
    }
  }
  // Calls fn() with the set's lock held: serialised with ForEach's calls,
  // and every stream in the set stays alive meanwhile.
  template <typename Fn>
  void Locked(Fn fn) const {
    aside::MutexLock lock(&mu_);
    fn();
  }

 private:
  mutable aside::Mutex mu_;
  std::set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

class Ticker {
 public:
  // Starts the thread `name` (at most 15 bytes, docs/operations.md
  // "Threads"), which runs `tick` every `interval`, the first time one
  // interval after the start.
  Ticker(const char* name, absl::Duration interval, std::function<void()> tick)
      : interval_(interval), tick_(std::move(tick)) {
    thread_ = std::thread([this, name] {
      NameThisThread(name);
      Run();
    });
  }
  ~Ticker() { Stop(); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // Has the thread run `tick` as soon as it is free, besides the
  // interval's runs (whose schedule stays). Cheap: a flag and a wake-up,
  // never waiting for a run in progress. Any thread, `tick` included (a
  // run then follows the current one).
  void Wake() {
    aside::MutexLock lock(&mu_);
    woken_ = true;
  }

  // Stops the thread and waits for it (a run in progress ends first).
  // Idempotent; not from `tick` itself.
  void Stop() {
    {
      aside::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) {
      thread_.join();
    }
  }

 private:
  void Run() {
    // Bounded, so that a far interval (a test's) does not overflow.
    const auto interval =
        absl::ToChronoNanoseconds(std::min(interval_, absl::Hours(24 * 365)));
    mu_.Lock();
    auto next = std::chrono::steady_clock::now() + interval;
    auto stop_or_woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || woken_;
    };
    while (!stop_) {
      mu_.AwaitUntil(aside::Cond(&stop_or_woken), next);
      if (stop_) {
        break;
      }
      if (!std::exchange(woken_, false)) {
        next = std::chrono::steady_clock::now() + interval;
      }
      mu_.Unlock();
      tick_();
      mu_.Lock();
    }
    mu_.Unlock();
  }

  const absl::Duration interval_;
  const std::function<void()> tick_;
  aside::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_STREAM_SET_H_
