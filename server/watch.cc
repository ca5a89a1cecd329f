#include "server/watch.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/clock.h"
#include "server/log.h"

namespace aside::server {
namespace {

std::vector<grpc::Slice> Slices(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  return slices;
}

bool ParseRequest(const grpc::ByteBuffer& buffer, v1::WatchRequest* out) {
  std::string bytes;
  for (const grpc::Slice& s : Slices(buffer)) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out->ParseFromString(bytes);
}

}  // namespace

// One Watch call. Thread-safe: publications arrive on publishing threads,
// write completions on gRPC's threads; everything below serialises on mu_.
class WatchHub::Stream final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
      public Group::Listener {
 public:
  Stream(WatchHub* hub, grpc::CallbackServerContext* context)
      : hub_(hub), context_(context) {}

  void Start(const grpc::ByteBuffer& request) {
    grpc::Status error;
    std::vector<GroupPtr> groups;
    {
      aside::MutexLock lock(&mu_);
      v1::WatchRequest req;
      error = ValidateLocked(request, &req);
      for (const Entry& e : entries_) {
        groups.push_back(e.group);
      }
    }
    {
      std::lock_guard<std::mutex> lock(hub_->mu_);
      if (error.ok() && hub_->shutting_down_) {
        error = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "server is shutting down");
      }
      hub_->streams_.insert(this);
    }
    if (!error.ok()) {
      aside::MutexLock lock(&mu_);
      FinishLocked(error);
      return;
    }
    // Listeners are added without holding mu_ (publication calls into the
    // stream with the group's listener lock held); a publication that comes
    // first only marks its group dirty.
    for (const GroupPtr& g : groups) {
      g->AddListener(this);
      if (const GroupMetrics* m = g->metrics()) {
        m->watch_subscribers->Increment();
      }
    }
    aside::MutexLock lock(&mu_);
    subscribed_ = true;
    WriteNextLocked();
  }

  void OnPublish(Group& group) override {
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.group.get() == &group) {
        e.dirty = true;
        if (e.published_at == 0) {
          e.published_at = MonotonicNanos();
        }
      }
    }
    WriteNextLocked();
  }

  void OnRemoved(Group& group, uint64_t generation) override {
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.group.get() == &group && !e.removed) {
        e.removed = true;
        e.removed_generation = generation;
        e.dirty = true;
      }
    }
    WriteNextLocked();
  }

  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    WriteNextLocked();
  }

  void OnCancel() override {
    aside::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    Unsubscribe();
    {
      std::lock_guard<std::mutex> lock(hub_->mu_);
      hub_->streams_.erase(this);
    }
    delete this;
  }

  // Janitor: ends the stream if a write has been stuck for too long.
  void CheckStall(int64_t now, absl::Duration limit) {
    aside::MutexLock lock(&mu_);
    if (writing_ && !finished_ &&
        now - write_started_ > absl::ToInt64Nanoseconds(limit)) {
      Log(LogLevel::kWarn, "watch.stalled",
          {{"peer", context_->peer()},
           {"stalled_for", absl::FormatDuration(absl::Nanoseconds(
                               now - write_started_))}});
      ForceFinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("subscriber did not read for ",
                       absl::FormatDuration(limit), "; stream ended")));
    }
  }

  void Shutdown() {
    aside::MutexLock lock(&mu_);
    ForceFinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   "server is shutting down"));
  }

 private:
  struct Entry {
    GroupPtr group;
    uint64_t sent = 0;  // generation the subscriber holds
    uint64_t known = 0;  // generation the subscriber said it holds
    bool dirty = true;
    bool removed = false;
    bool done = false;  // removal sent
    uint64_t removed_generation = 0;
    int64_t published_at = 0;
  };

  grpc::Status ValidateLocked(const grpc::ByteBuffer& buffer,
                              v1::WatchRequest* req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ParseRequest(buffer, req)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "request does not parse"};
    }
    if (req->groups().empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "groups: at least one group is required"};
    }
    if (req->groups_size() > kMaxWatchGroups) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("groups: ", req->groups_size(), " groups (at most ",
                           kMaxWatchGroups, ")")};
    }
    if (req->subscriber().size() > 128) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "subscriber: longer than 128 bytes"};
    }
    std::set<std::string> seen;
    for (int i = 0; i < req->groups_size(); ++i) {
      const std::string& name = req->groups(i);
      if (!seen.insert(name).second) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("groups[", i, "]: '", name, "' is listed twice")};
      }
      GroupPtr group = hub_->groups_->Find(name);
      if (group == nullptr) {
        if (absl::Status s = ValidateGroupName(name); !s.ok()) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("groups[", i, "]: ", s.message())};
        }
        return {grpc::StatusCode::NOT_FOUND,
                absl::StrCat("group '", name, "' not found")};
      }
      Entry e;
      e.group = std::move(group);
      auto known = req->known_generations().find(name);
      if (known != req->known_generations().end()) {
        e.known = known->second;
      }
      entries_.push_back(std::move(e));
    }
    return grpc::Status::OK;
  }

  // Starts the next write if none is in flight: the next dirty group in
  // round-robin order, with the newest state of that group.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !subscribed_) {
      return;
    }
    for (size_t step = 0; step < entries_.size(); ++step) {
      Entry& e = entries_[(next_ + step) % entries_.size()];
      if (!e.dirty || e.done) {
        continue;
      }
      e.dirty = false;
      const GroupMetrics* gm = e.group->metrics();
      prometheus::Counter* kind = nullptr;
      if (e.removed) {
        buffer_ = EncodeRemoved(e.group->name(), e.removed_generation,
                                "group deleted", e.group->server_id());
        e.done = true;
        kind = gm != nullptr ? gm->watch_removed : nullptr;
      } else {
        std::shared_ptr<const EncodedUpdate> update = e.group->Encoded();
        if (update->generation == e.sent) {
          continue;
        }
        if (e.sent == 0 && e.known != 0 && e.known == update->generation) {
          buffer_ = EncodeUnchanged(e.group->name(), update->generation,
                                    e.group->server_id());
          kind = gm != nullptr ? gm->watch_unchanged : nullptr;
        } else if (update->delta.has_value() && update->base_generation != 0 &&
                   update->base_generation == (e.sent != 0 ? e.sent : e.known)) {
          buffer_ = *update->delta;
          kind = gm != nullptr ? gm->watch_delta : nullptr;
        } else {
          buffer_ = update->full;
          kind = gm != nullptr ? gm->watch_full : nullptr;
        }
        e.sent = update->generation;
      }
      const int64_t now = MonotonicNanos();
      if (kind != nullptr) {
        kind->Increment();
      }
      if (hub_->metrics_ != nullptr && e.published_at != 0) {
        hub_->metrics_->watch_fanout.Observe(
            static_cast<double>(now - e.published_at) * 1e-9);
      }
      e.published_at = 0;
      next_ = (next_ + step + 1) % entries_.size();
      writing_ = true;
      write_started_ = now;
      StartWrite(&buffer_);
      return;
    }
    // Every group was deleted: nothing more will come.
    bool all_done = true;
    for (const Entry& e : entries_) {
      all_done = all_done && e.done;
    }
    if (all_done) {
      FinishLocked(grpc::Status::OK);
    }
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) {
      return;
    }
    finished_ = true;
    Finish(status);
  }

  // Finishes even with a write stuck in flow control: the status is queued
  // and the call is cancelled so the transport lets go of it.
  void ForceFinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool stuck = writing_;
    FinishLocked(status);
    if (stuck) {
      context_->TryCancel();
    }
  }

  void Unsubscribe() {
    std::vector<Entry> entries;
    {
      aside::MutexLock lock(&mu_);
      if (!subscribed_) {
        return;
      }
      subscribed_ = false;
      entries = entries_;
    }
    // Not holding mu_: see Start().
    for (Entry& e : entries) {
      e.group->RemoveListener(this);
      if (const GroupMetrics* m = e.group->metrics()) {
        m->watch_subscribers->Decrement();
      }
    }
  }

  WatchHub* const hub_;
  grpc::CallbackServerContext* const context_;
  aside::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t write_started_ ABSL_GUARDED_BY(mu_) = 0;
};

WatchHub::WatchHub(GroupRegistry* groups, Metrics* metrics,
                   absl::Duration stall_timeout)
    : groups_(groups), metrics_(metrics), stall_timeout_(stall_timeout) {
  janitor_ = std::thread([this] { Janitor(); });
}

WatchHub::~WatchHub() {
  Shutdown();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_janitor_ = true;
  }
  janitor_changed_.notify_all();
  janitor_.join();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchHub::Start(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto* stream = new Stream(this, context);
  stream->Start(*request);
  return stream;
}

void WatchHub::Shutdown() {
  std::vector<Stream*> streams;
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  // Holding mu_ keeps every stream alive (OnDone erases under mu_).
  for (Stream* s : streams_) {
    s->Shutdown();
  }
}

size_t WatchHub::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

void WatchHub::Janitor() {
  const absl::Duration tick =
      std::min(absl::Seconds(1), stall_timeout_ / 4);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_janitor_) {
    janitor_changed_.wait_for(lock, absl::ToChronoNanoseconds(tick),
                              [this] { return stop_janitor_; });
    if (stop_janitor_) {
      break;
    }
    const int64_t now = MonotonicNanos();
    for (Stream* s : streams_) {
      s->CheckStall(now, stall_timeout_);
    }
  }
}

}  // namespace aside::server
