#include "server/api/mutation_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/thread_name.h"

namespace aside::server {

MutationQueue::MutationQueue(Options options) : options_(options) {}

MutationQueue::~MutationQueue() { Stop(); }

void MutationQueue::Stop() {
  std::vector<std::thread> workers;
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  for (std::thread& t : workers) {
    t.join();
  }
}

MutationQueue::Admission MutationQueue::Admit(size_t jobs) {
  aside::MutexLock lock(&mu_);
  Admission out;
  const size_t queued = jobs_.size();
  if (queued + jobs > options_.max_queued) {
    out.admitted = false;
    out.reason =
        absl::StrCat(queued, " writes are waiting (at most ",
                     options_.max_queued, ": admin.max_queued_writes)");
  } else if (queued > 0) {
    const absl::Duration waited =
        absl::Nanoseconds(options_.clock->NowNanos() - jobs_.front().queued_at);
    if (waited >= options_.max_wait) {
      out.admitted = false;
      out.reason = absl::StrCat("the oldest waiting write has waited ",
                                absl::FormatDuration(waited), " (at most ",
                                absl::FormatDuration(options_.max_wait),
                                ": admin.max_write_wait)");
    }
  }
  if (!out.admitted) {
    ++refused_;
    // The queue ahead drains `workers` jobs per mean job time.
    const double workers =
        static_cast<double>(std::max<size_t>(1, workers_.size()));
    out.retry_after = std::clamp(
        absl::Nanoseconds(mean_run_nanos_ * static_cast<double>(queued + jobs) /
                          workers),
        kMinRetryHint, kMaxRetryHint);
  }
  return out;
}

void MutationQueue::Run(std::function<void()> job) {
  aside::MutexLock lock(&mu_);
  jobs_.push_back({std::move(job), options_.clock->NowNanos()});
  // A worker more only when every one is busy: writes one at a time keep
  // to one thread (and one malloc arena), bursts get up to max_workers.
  if (idle_ < jobs_.size() && workers_.size() < options_.max_workers) {
    workers_.emplace_back([this] {
      NameThisThread(options_.thread_name);
      Work();
    });
  }
}

void MutationQueue::Work() {
  for (;;) {
    Job job;
    {
      aside::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await([this] {
        mu_.AssertHeld();
        return !jobs_.empty() || stopping_;
      });
      --idle_;
      if (jobs_.empty()) {
        return;  // stopping, and nothing left to run
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
    }
    const int64_t start = options_.clock->NowNanos();
    job.run();
    const double took = static_cast<double>(options_.clock->NowNanos() - start);
    aside::MutexLock lock(&mu_);
    --running_;
    mean_run_nanos_ =
        mean_run_nanos_ == 0 ? took : 0.9 * mean_run_nanos_ + 0.1 * took;
  }
}

MutationQueue::Stats MutationQueue::stats() const {
  aside::MutexLock lock(&mu_);
  return {.workers = workers_.size(),
          .running = running_,
          .queued = jobs_.size(),
          .refused = refused_};
}

}  // namespace aside::server
