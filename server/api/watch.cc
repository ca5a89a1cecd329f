// The Watch hub (watch.h): its completion queues and the thread polling
// each, the set of open streams and the janitor that ends stalled ones
// (server/base/stream_set.h), and attaching groups added later to the
// streams waiting for them. One stream is watch_stream.h and
// watch_stream.cc.
#include "server/api/watch.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/api/watch_stream.h"
#include "server/base/log.h"

namespace aside::server {

WatchHub::WatchHub(GroupRegistry* groups, Metrics* metrics,
                   absl::Duration stall_timeout, uint32_t max_streams_per_peer,
                   EventLoop* loop)
    : groups_(groups),
      metrics_(metrics),
      stall_timeout_(stall_timeout),
      peer_limit_("max_watch_streams_per_peer", "Watch streams",
                  max_streams_per_peer, metrics),
      janitor_(loop, "aside-watch-jan",
               std::min(absl::Seconds(1), stall_timeout / 4),
               [this] { EndStalled(); }) {
  groups_->AddListener(this);
}

WatchHub::~WatchHub() {
  // Waits for an announcement in progress, which takes the set's lock.
  groups_->RemoveListener(this);
  StopServing();
  janitor_.Stop();
}

void WatchHub::AddCompletionQueues(grpc::ServerBuilder& builder, int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    auto shard = std::make_unique<Shard>();
    shard->cq = builder.AddCompletionQueue();
    shards_.push_back(std::move(shard));
  }
}

void WatchHub::Serve(Requesters request) {
  request_ = std::move(request);
  serving_ = true;
  for (const auto& shard : shards_) {
    RequestCall(shard.get(), /*confirmed=*/false);
    RequestCall(shard.get(), /*confirmed=*/true);
    shard->thread = std::thread([shard = shard.get()] {
      NameThisThread("aside-watch-cq");
      Poll(shard);
    });
  }
}

void WatchHub::RequestCall(Shard* shard, bool confirmed) {
  aside::MutexLock lock(&mu_);
  if (stopping_) {
    return;
  }
  ++alive_;
  (new Stream(this, shard, confirmed))->Request(request_);
}

void WatchHub::Ready(Shard* shard, Stream* stream) {
  aside::MutexLock lock(&shard->mu);
  shard->ready.push_back(stream);
  if (!shard->armed) {
    shard->armed = true;
    // Fires at once, on the shard's thread: one wake-up for every stream
    // queued until then.
    shard->wake.Set(shard->cq.get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), shard);
  }
}

void WatchHub::RunReady(Shard* shard) {
  std::vector<Stream*> ready;
  {
    aside::MutexLock lock(&shard->mu);
    ready.swap(shard->ready);
    shard->armed = false;
  }
  for (Stream* s : ready) {
    if (s->RunReady()) {
      delete s;
    }
  }
}

void WatchHub::Poll(Shard* shard) {
  void* tag = nullptr;
  bool ok = false;
  while (shard->cq->Next(&tag, &ok)) {
    if (tag == shard) {
      RunReady(shard);
      continue;
    }
    auto* op = static_cast<Op*>(tag);
    op->stream->Complete(op->kind, ok);
  }
}

void WatchHub::StopServing() {
  Shutdown();
  {
    aside::MutexLock lock(&mu_);
    stopping_ = true;
    // The server's shutdown ended every call and failed every request, so
    // each stream's last completion is on its way; the shards' threads
    // delete them.
    if (serving_ && !mu_.AwaitWithTimeout(
                        [this] {
                          mu_.AssertHeld();
                          return alive_ == 0;
                        },
                        absl::Seconds(10))) {
      Log(LogLevel::kError, "watch.stop_serving",
          {{"streams_left", absl::StrCat(alive_)}});
    }
  }
  for (const auto& shard : shards_) {
    shard->cq->Shutdown();
  }
  for (const auto& shard : shards_) {
    if (shard->thread.joinable()) {
      shard->thread.join();
    } else {
      Poll(shard.get());  // never served: drains the queue's shutdown
    }
  }
  shards_.clear();
  serving_ = false;
}

void WatchHub::Shutdown() { streams_.Shutdown(); }

size_t WatchHub::streams() const { return streams_.size(); }

void WatchHub::OnAdded(Group& group, const TableConstPtr& /*table*/) {
  streams_.ForEach([&group](Stream* s) {
    if (s->waiting()) {
      s->Reattach(&group.name());
    }
  });
}

void WatchHub::EndStalled() {
  const int64_t now = MonotonicNanos();
  streams_.ForEach(
      [this, now](Stream* s) { s->CheckStall(now, stall_timeout_); });
}

}  // namespace aside::server
