#include "server/fleet/prefix_follower.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace aside::server::fleet {

PrefixFollower::PrefixFollower(etcd::EtcdClient* client, std::string prefix,
                               Handlers handlers)
    : client_(client),
      prefix_(std::move(prefix)),
      handlers_(std::move(handlers)) {}

PrefixFollower::~PrefixFollower() { Stop(); }

void PrefixFollower::Start() {
  thread_ = std::thread([this] { Run(); });
}

void PrefixFollower::Stop() {
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

bool PrefixFollower::synced() const {
  aside::MutexLock lock(&mu_);
  return synced_ && watch_ != nullptr && watch_->connected();
}

void PrefixFollower::Run() {
  absl::Duration backoff = absl::Milliseconds(250);
  std::string logged_error;
  while (true) {
    bool snapshot = false;
    {
      aside::MutexLock lock(&mu_);
      if (stopping_) {
        break;
      }
      snapshot = need_snapshot_;
    }
    if (snapshot) {
      absl::StatusOr<etcd::RangeResult> range = client_->Range(prefix_);
      if (!range.ok()) {
        if (range.status().message() != logged_error) {
          logged_error = std::string(range.status().message());
          Log(LogLevel::kWarn, "fleet.unavailable",
              {{"prefix", prefix_}, {"error", logged_error}});
        }
        aside::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(
            [this] {
              mu_.AssertHeld();
              return stopping_;
            },
            backoff);
        backoff = std::min(backoff * 2, absl::Seconds(5));
        continue;
      }
      backoff = absl::Milliseconds(250);
      logged_error.clear();
      handlers_.on_snapshot(std::move(range->kvs), range->revision);
      aside::MutexLock lock(&mu_);
      revision_ = range->revision;
      need_snapshot_ = false;
      synced_ = true;
    }
    int64_t from = 0;
    {
      aside::MutexLock lock(&mu_);
      from = revision_ + 1;
    }
    std::unique_ptr<etcd::Watch> watch = client_->WatchPrefix(
        {.prefix = prefix_, .start_revision = from},
        {.on_events =
             [this](etcd::WatchBatch b) {
               handlers_.on_events(b);
               aside::MutexLock lock(&mu_);
               revision_ = b.revision;
             },
         .on_compacted =
             [this](int64_t compact_revision) {
               Log(LogLevel::kWarn, "fleet.compacted",
                   {{"prefix", prefix_},
                    {"compact_revision", absl::StrCat(compact_revision)},
                    {"action", "reloading a snapshot"}});
               aside::MutexLock lock(&mu_);
               need_snapshot_ = true;
             },
         .on_disconnected = [](const absl::Status&) {}});
    {
      aside::MutexLock lock(&mu_);
      watch_ = std::move(watch);
      mu_.Await([this] {
        mu_.AssertHeld();
        return stopping_ || need_snapshot_;
      });
      synced_ = false;
      watch = std::move(watch_);
    }
    watch.reset();  // joins the watch's thread (outside mu_)
  }
}

}  // namespace aside::server::fleet
