#include "server/base/event_loop.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <optional>
#include <utility>

#include "lib/thread_name.h"

namespace aside::server {

namespace asio = boost::asio;

EventLoop::EventLoop(const char* name) : work_(io_.get_executor()) {
  thread_ = std::thread([this, name] {
    NameThisThread(name);
    thread_id_.store(std::this_thread::get_id());
    io_.run();
  });
}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Post(std::function<void()> fn) {
  asio::post(io_, std::move(fn));
}

void EventLoop::Stop() {
  work_.reset();
  io_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

// Shared by the timer and every handler it queued on the loop: whichever
// lets go of it last destroys it (and its asio timer, which then has no
// wait pending).
struct LoopTimer::State {
  State(EventLoop* l, std::function<void(bool)> f)
      : loop(l), fn(std::move(f)), timer(l->context()) {}

  using TimePoint = std::chrono::steady_clock::time_point;

  // Runs fn unless stopped; `due` as fn takes it.
  static void Run(const std::shared_ptr<State>& s, bool due) {
    {
      aside::MutexLock lock(&s->mu);
      if (s->stopped) {
        return;
      }
      if (due) {
        // A handler of an earlier arming, or one for a time that moved:
        // only a run at or past the time asked for counts.
        if (!s->due_at.has_value() ||
            *s->due_at > std::chrono::steady_clock::now()) {
          return;
        }
        s->due_at.reset();
      } else {
        s->soon_posted = false;
      }
      s->running = true;
    }
    s->fn(due);
    aside::MutexLock lock(&s->mu);
    s->running = false;
  }

  // On the loop's thread: waits for the time asked for, if any.
  static void Arm(const std::shared_ptr<State>& s) {
    TimePoint at;
    {
      aside::MutexLock lock(&s->mu);
      if (s->stopped || !s->due_at.has_value()) {
        return;
      }
      at = *s->due_at;
    }
    s->timer.expires_at(at);
    s->timer.async_wait([s](const boost::system::error_code& ec) {
      if (!ec) {
        Run(s, true);
      }
    });
  }

  EventLoop* const loop;
  const std::function<void(bool)> fn;
  asio::steady_timer timer;  // the loop's thread only
  aside::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  bool running ABSL_GUARDED_BY(mu) = false;
  bool soon_posted ABSL_GUARDED_BY(mu) = false;
  std::optional<TimePoint> due_at ABSL_GUARDED_BY(mu);
};

LoopTimer::LoopTimer(EventLoop* loop, std::function<void(bool due)> fn)
    : state_(std::make_shared<State>(loop, std::move(fn))) {}

LoopTimer::~LoopTimer() { Stop(); }

void LoopTimer::RunAfter(absl::Duration delay) {
  // Bounded, so that a far delay (a test's) does not overflow.
  const auto at = std::chrono::steady_clock::now() +
                  absl::ToChronoNanoseconds(std::clamp(
                      delay, absl::ZeroDuration(), absl::Hours(24 * 365)));
  {
    aside::MutexLock lock(&state_->mu);
    if (state_->stopped ||
        (state_->due_at.has_value() && *state_->due_at <= at)) {
      return;
    }
    state_->due_at = at;
  }
  state_->loop->Post([s = state_] { State::Arm(s); });
}

void LoopTimer::RunSoon() {
  {
    aside::MutexLock lock(&state_->mu);
    if (state_->stopped || state_->soon_posted) {
      return;
    }
    state_->soon_posted = true;
  }
  state_->loop->Post([s = state_] { State::Run(s, false); });
}

void LoopTimer::Stop() {
  const bool in_loop = state_->loop->InLoop();
  {
    aside::MutexLock lock(&state_->mu);
    if (state_->stopped) {
      return;
    }
    state_->stopped = true;
    state_->due_at.reset();
    // On the loop's thread fn is not running, or this is fn itself.
    if (!in_loop) {
      state_->mu.Await(
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !state_->running; });
    }
  }
  // A wait pending on a far time ends now (and lets go of the state).
  state_->loop->Post([s = state_] { s->timer.cancel(); });
}

Ticker::Ticker(EventLoop* loop, const char* name, absl::Duration interval,
               std::function<void()> tick)
    : interval_(interval), tick_(std::move(tick)) {
  if (loop != nullptr) {
    timer_ = std::make_unique<LoopTimer>(loop, [this](bool due) {
      if (due) {
        timer_->RunAfter(interval_);
      }
      tick_();
    });
    timer_->RunAfter(interval_);
    return;
  }
  thread_ = std::thread([this, name] {
    NameThisThread(name);
    Run();
  });
}

void Ticker::Wake() {
  if (timer_ != nullptr) {
    timer_->RunSoon();
    return;
  }
  aside::MutexLock lock(&mu_);
  woken_ = true;
}

void Ticker::Stop() {
  if (timer_ != nullptr) {
    timer_->Stop();
    return;
  }
  {
    aside::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Ticker::Run() {
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

}  // namespace aside::server
