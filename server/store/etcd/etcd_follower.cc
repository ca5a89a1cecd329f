#include "server/store/etcd/etcd_follower.h"

#include <algorithm>
#include <utility>

#include "lib/thread_name.h"

namespace aside::server::etcd {

Follower::Follower(EtcdClient* client, std::string prefix, Handlers handlers)
    : client_(client),
      prefix_(std::move(prefix)),
      handlers_(std::move(handlers)) {}

Follower::~Follower() { Stop(); }

void Follower::Start(std::optional<int64_t> revision) {
  {
    aside::MutexLock lock(&mu_);
    need_snapshot_ = !revision.has_value();
    synced_ = revision.has_value();
    revision_ = revision.value_or(0);
  }
  thread_ = std::thread([this] {
    NameThisThread("aside-etcd-fol");
    Run();
  });
}

void Follower::Stop() {
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool Follower::synced() const {
  aside::MutexLock lock(&mu_);
  return synced_ && watch_ != nullptr && watch_->connected();
}

void Follower::Run() {
  while (true) {
    bool snapshot = false;
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        return;
      }
      snapshot = need_snapshot_;
    }
    if (snapshot && !Snapshot()) {
      return;
    }
    WatchOnce();
  }
}

bool Follower::Snapshot() {
  absl::Duration backoff = absl::Milliseconds(250);
  std::string reported;
  while (true) {
    absl::StatusOr<int64_t> revision = handlers_.snapshot();
    if (revision.ok()) {
      aside::MutexLock lock(&mu_);
      revision_ = *revision;
      need_snapshot_ = false;
      synced_ = true;
      return true;
    }
    if (revision.status().message() != reported) {
      reported = std::string(revision.status().message());
      if (handlers_.on_unavailable) {
        handlers_.on_unavailable(revision.status());
      }
    }
    aside::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        [this] {
          mu_.AssertHeld();
          return stopping_;
        },
        backoff);
    if (stopping_) {
      return false;
    }
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

bool Follower::Watching() const {
  aside::MutexLock lock(&mu_);
  return !stopping_ && !need_snapshot_;
}

void Follower::WatchOnce() {
  int64_t from = 0;
  {
    aside::MutexLock lock(&mu_);
    from = revision_ + 1;
    watch_failed_ = false;
  }
  std::unique_ptr<Watch> watch =
      client_->WatchPrefix({.prefix = prefix_, .start_revision = from},
                           {.on_events =
                                [this](WatchBatch b) {
                                  const int64_t revision = b.revision;
                                  handlers_.on_events(std::move(b));
                                  aside::MutexLock lock(&mu_);
                                  revision_ = revision;
                                },
                            .on_compacted =
                                [this](int64_t compact_revision) {
                                  if (handlers_.on_compacted) {
                                    handlers_.on_compacted(compact_revision);
                                  }
                                  aside::MutexLock lock(&mu_);
                                  need_snapshot_ = true;
                                  synced_ = false;
                                },
                            .on_disconnected =
                                [this](const absl::Status& s) {
                                  if (handlers_.on_disconnected) {
                                    handlers_.on_disconnected(s);
                                  }
                                  aside::MutexLock lock(&mu_);
                                  watch_failed_ = true;
                                }});
  const Watch* const running = watch.get();
  {
    aside::MutexLock lock(&mu_);
    watch_ = std::move(watch);
  }
  // Report the connection every second until a snapshot is needed. A watch
  // that has not failed yet counts as connected while it connects: the
  // snapshot (or the revision Start was given) was just read from etcd.
  while (Watching()) {
    if (handlers_.on_connected) {
      bool failed = false;
      {
        aside::MutexLock lock(&mu_);
        failed = watch_failed_;
      }
      handlers_.on_connected(running->connected() || !failed);
    }
    aside::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        [this] {
          mu_.AssertHeld();
          return stopping_ || need_snapshot_;
        },
        absl::Seconds(1));
  }
  {
    aside::MutexLock lock(&mu_);
    watch = std::move(watch_);
  }
  watch.reset();  // joins the watch's thread (outside mu_)
  if (handlers_.on_connected) {
    handlers_.on_connected(false);
  }
}

absl::AnyInvocable<absl::StatusOr<int64_t>()> RangeSnapshot(
    EtcdClient* client, std::string prefix,
    absl::AnyInvocable<void(std::vector<KeyValue> kvs, int64_t revision)>
        apply) {
  return [client, prefix = std::move(prefix),
          apply = std::move(apply)]() mutable -> absl::StatusOr<int64_t> {
    absl::StatusOr<RangeResult> range = client->Range(prefix);
    if (!range.ok()) {
      return range.status();
    }
    apply(std::move(range->kvs), range->revision);
    return range->revision;
  };
}

}  // namespace aside::server::etcd
