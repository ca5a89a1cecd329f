// The server's control loop thread and the timers that run on it.
//
// EventLoop is one named thread running a Boost.Asio io_context: the
// server's periodic work (table rebuilds, the Watch janitor, grpclb's
// overload checks, the status history, the load view's export and its
// watchdog) runs there as timers instead of a thread each. Work on it runs
// one piece at a time, in order, so a timer's function must not block: it
// may take locks that are held briefly, never wait for another timer.
//
// LoopTimer is a function run on a loop at a time, or soon, that never runs
// once Stop() has returned: its state is shared with the handlers queued on
// the loop, so it may be destroyed on any thread while one is queued.
//
// Ticker runs a function every interval, and soon after Wake() (one run for
// any number of wakes before it starts), on a loop's thread, or, built
// without a loop, on a named thread of its own (tests, and work that must
// not wait behind the loop's).
//
// Thread-safe. Stop/destroy timers before their loop.
#ifndef ASIDE_SERVER_BASE_EVENT_LOOP_H_
#define ASIDE_SERVER_BASE_EVENT_LOOP_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::server {

class EventLoop {
 public:
  // Starts the thread `name` (at most 15 bytes, docs/operations.md
  // "Threads").
  explicit EventLoop(const char* name);
  // Stop().
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  boost::asio::io_context& context() { return io_; }
  // Runs `fn` on the loop's thread, after what is queued before it.
  void Post(std::function<void()> fn);
  // Whether the caller runs on the loop's thread.
  bool InLoop() const {
    return std::this_thread::get_id() == thread_id_.load();
  }
  // Stops the loop and joins its thread; what is queued is dropped.
  // Idempotent; not from the loop's thread.
  void Stop();

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      work_;
  std::atomic<std::thread::id> thread_id_;
  std::thread thread_;
};

class LoopTimer {
 public:
  // `fn(due)` runs on `loop`'s thread: due is true for a run that a
  // RunAfter asked for, false for one that RunSoon asked for.
  LoopTimer(EventLoop* loop, std::function<void(bool due)> fn);
  // Stop().
  ~LoopTimer();
  LoopTimer(const LoopTimer&) = delete;
  LoopTimer& operator=(const LoopTimer&) = delete;

  // Runs fn(true) `delay` from now, or at the time already asked for when
  // that is earlier (one run for both). Any thread.
  void RunAfter(absl::Duration delay);
  // Runs fn(false) as soon as the loop is free; one run for any number of
  // calls before it starts. Any thread, fn included.
  void RunSoon();
  // After it returns, fn is not running (unless this is fn's own thread)
  // and never runs again. Idempotent; any thread.
  void Stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class Ticker {
 public:
  // Runs `tick` on `loop` every `interval`, the first time one interval
  // after the start; without a loop (null), on a thread of its own named
  // `name` (at most 15 bytes, docs/operations.md "Threads").
  Ticker(EventLoop* loop, const char* name, absl::Duration interval,
         std::function<void()> tick);
  // A thread of its own.
  Ticker(const char* name, absl::Duration interval, std::function<void()> tick)
      : Ticker(nullptr, name, interval, std::move(tick)) {}
  ~Ticker() { Stop(); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // Runs `tick` as soon as it is free, besides the interval's runs (whose
  // schedule stays). Cheap: a flag and a wake-up, never waiting for a run
  // in progress. Any thread, `tick` included (a run then follows the
  // current one).
  void Wake();

  // Stops and waits for a run in progress to end. Idempotent; not from
  // `tick` itself.
  void Stop();

 private:
  void Run();

  const absl::Duration interval_;
  const std::function<void()> tick_;
  // On a loop.
  std::unique_ptr<LoopTimer> timer_;
  // On a thread of its own.
  aside::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_EVENT_LOOP_H_
