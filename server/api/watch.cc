#include "server/api/watch.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/net/guarded_relay.h"

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

// A GroupUpdate telling the subscriber that `group` does not exist here.
grpc::ByteBuffer EncodeAbsent(const std::string& group, uint64_t generation,
                              v1::GroupRemoved::Cause cause,
                              const std::string& server_id) {
  v1::GroupUpdate update;
  update.set_server_id(server_id);
  update.set_group(group);
  update.set_generation(generation);
  v1::GroupRemoved* removed = update.mutable_removed();
  removed->set_cause(cause);
  removed->set_code(static_cast<int32_t>(grpc::StatusCode::NOT_FOUND));
  removed->set_reason(
      cause == v1::GroupRemoved::CAUSE_DELETED
          ? absl::StrCat("group '", EchoName(group), "' was deleted")
          : absl::StrCat("group '", EchoName(group), "' not found"));
  std::string bytes = update.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

// A completion-queue tag: which operation of which stream completed.
struct WatchHub::Op {
  enum Kind { kRequest, kWrite, kFinish, kDone };
  Stream* stream;
  Kind kind;
};

// One Watch call. Thread-safe: publications arrive on publishing threads,
// completions on the hub thread of the stream's completion queue, group
// (re)appearances on the thread that added the group; everything below
// serialises on mu_.
//
// Life: constructed to request a call (Request); the request's completion
// starts it (Start: validation, peer cap, subscription, first writes); at
// most one write and one Finish are in flight; the done notification
// unsubscribes it and takes it out of the hub; it is deleted once that
// notification and every operation it started have completed. All of a
// stream's completions arrive on one thread, so the deletion is decided
// there without a race.
//
// Each requested name is an Entry. A name without a group (unknown at
// subscription, or deleted since) is reported once with GroupRemoved and
// stays in the stream, `absent`: when the registry adds a group of that
// name, the hub has the stream look it up again (Reattach), listen to it
// and send its full table.
class WatchHub::Stream final : public Group::Listener {
 public:
  // Counted in the hub's alive_ (the caller holds the hub's mu_).
  Stream(WatchHub* hub, Shard* shard)
      : hub_(hub), shard_(shard), writer_(&context_) {}
  ~Stream() override {
    aside::MutexLock lock(&hub_->mu_);
    --hub_->alive_;
  }

  void Request(const Requester& request) {
    context_.AsyncNotifyWhenDone(&done_op_);
    request(&context_, &request_, &writer_, shard_->cq.get(), &request_op_);
  }

  // On the queue's thread.
  void Complete(Op::Kind kind, bool ok) {
    bool release = false;
    switch (kind) {
      case Op::kRequest:
        if (!ok) {
          // The server is shutting down; the call never started, and gRPC
          // sends no done notification for it.
          delete this;
          return;
        }
        hub_->RequestCall(shard_);
        Start();
        return;
      case Op::kWrite:
        release = OnWriteDone(ok);
        break;
      case Op::kFinish: {
        aside::MutexLock lock(&mu_);
        finishing_ = false;
        release = ReleasableLocked();
        break;
      }
      case Op::kDone:
        release = OnDone();
        break;
    }
    if (release) {
      delete this;
    }
  }

  void Start() {
    grpc::Status error;
    std::vector<GroupPtr> groups;
    {
      aside::MutexLock lock(&mu_);
      v1::WatchRequest req;
      error = ValidateLocked(request_, &req);
      request_.Clear();
      for (const Entry& e : entries_) {
        if (e.group != nullptr) {
          groups.push_back(e.group);
        }
      }
    }
    {
      aside::MutexLock lock(&hub_->mu_);
      if (error.ok() && hub_->shutting_down_) {
        error = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "server is shutting down");
      }
      if (error.ok()) {
        error = hub_->peer_limit_.Acquire(ClientPeer(context_.peer()), &peer_);
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
      Listen(*g);
    }
    {
      aside::MutexLock lock(&mu_);
      subscribed_ = true;
      // A group deleted between the lookup and AddListener never told us.
      for (Entry& e : entries_) {
        if (e.group != nullptr && !e.absent &&
            hub_->groups_->Find(e.name) != e.group) {
          MarkAbsentLocked(e, v1::GroupRemoved::CAUSE_DELETED,
                           e.group->table()->generation());
        }
      }
      WriteNextLocked();
    }
    // A group added between the lookup in ValidateLocked and now was
    // announced while this stream was not subscribed (Reattach ignored it)
    // or not yet in the hub: look absent names up once more. The group is
    // in the registry before it is announced, so either that announcement
    // or this lookup finds it; both run under the hub's mu_, so they never
    // attach the same group twice.
    if (waiting()) {
      aside::MutexLock lock(&hub_->mu_);
      Reattach(nullptr);
    }
  }

  void OnPublish(Group& group) override {
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.group.get() == &group && !e.absent) {
        e.dirty = true;
        if (e.published_at == 0) {
          e.published_at = MonotonicNanos();
        }
      }
    }
    KickLocked();
  }

  void OnRemoved(Group& group, uint64_t generation) override {
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.group.get() == &group && !e.absent) {
        MarkAbsentLocked(e, v1::GroupRemoved::CAUSE_DELETED, generation);
      }
    }
    KickLocked();
  }

  // The write completed: the next one starts. True when the stream may
  // go.
  bool OnWriteDone(bool ok) {
    aside::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
    } else {
      WriteNextLocked();
    }
    return ReleasableLocked();
  }

  // The call is over (finished, or cancelled by the peer, a deadline, the
  // connection's end or the server): no more writes. True when the stream
  // may go.
  bool OnDone() {
    {
      aside::MutexLock lock(&mu_);
      finished_ = true;
    }
    Unsubscribe();
    {
      aside::MutexLock lock(&hub_->mu_);
      hub_->streams_.erase(this);
      hub_->peer_limit_.Release(peer_);
    }
    aside::MutexLock lock(&mu_);
    done_ = true;
    return ReleasableLocked();
  }

  // Janitor: ends the stream if a write has been stuck for too long.
  void CheckStall(int64_t now, absl::Duration limit) {
    aside::MutexLock lock(&mu_);
    if (writing_ && !finished_ &&
        now - write_started_ > absl::ToInt64Nanoseconds(limit)) {
      Log(LogLevel::kWarn, "watch.stalled",
          {{"peer", ClientPeer(context_.peer())},
           {"stalled_for",
            absl::FormatDuration(absl::Nanoseconds(now - write_started_))}});
      if (hub_->metrics_ != nullptr) {
        hub_->metrics_->limit_refused.Add({{"limit", "watch_stall_timeout"}})
            .Increment();
      }
      ForceFinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("limits.watch_stall_timeout: subscriber did not read "
                       "for ",
                       absl::FormatDuration(limit), "; stream ended")));
    }
  }

  // Whether some requested name has no group (the hub then calls Reattach
  // when a group is added).
  bool waiting() const {
    return absent_count_.load(std::memory_order_acquire) > 0;
  }

  // With the hub's mu_ held (which keeps this stream alive and serialises
  // Reattach calls): for every absent name (or only `name`, when given)
  // that now has a group, listens to that group and queues its full table.
  void Reattach(const std::string* name) {
    std::vector<std::pair<size_t, GroupPtr>> found;
    {
      aside::MutexLock lock(&mu_);
      if (finished_ || !subscribed_) {
        return;
      }
      for (size_t i = 0; i < entries_.size(); ++i) {
        const Entry& e = entries_[i];
        if (!e.absent || (name != nullptr && e.name != *name)) {
          continue;
        }
        GroupPtr g = hub_->groups_->Find(e.name);
        if (g != nullptr && g != e.group) {
          found.emplace_back(i, std::move(g));
        }
      }
    }
    if (found.empty()) {
      return;
    }
    for (const auto& [i, g] : found) {
      Listen(*g);
    }
    std::vector<GroupPtr> previous;
    bool undo = false;
    {
      aside::MutexLock lock(&mu_);
      if (!subscribed_) {
        // Unsubscribe() ran meanwhile and did not see these.
        undo = true;
      } else {
        for (auto& [i, g] : found) {
          Entry& e = entries_[i];
          if (e.group != nullptr) {
            previous.push_back(std::move(e.group));
          }
          e.group = g;
          e.absent = false;
          e.absent_sent = false;
          e.sent = 0;
          e.known = 0;
          e.dirty = true;
          e.published_at = 0;
          absent_count_.fetch_sub(1, std::memory_order_acq_rel);
          // Deleted again between the lookup and AddListener.
          if (hub_->groups_->Find(e.name) != g) {
            MarkAbsentLocked(e, v1::GroupRemoved::CAUSE_DELETED,
                             g->table()->generation());
          }
        }
        KickLocked();
      }
    }
    if (undo) {
      for (const auto& [i, g] : found) {
        Unlisten(*g);
      }
    }
    for (const GroupPtr& g : previous) {
      Unlisten(*g);
    }
  }

  // On the shard's thread, taken off its ready list: starts the next write.
  // True when the stream may go.
  bool RunReady() {
    aside::MutexLock lock(&mu_);
    queued_ = false;
    WriteNextLocked();
    return ReleasableLocked();
  }

  void Shutdown() {
    aside::MutexLock lock(&mu_);
    ForceFinishLocked(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
  }

 private:
  struct Entry {
    std::string name;
    // The group listened to: the current one, or (while `absent` after a
    // deletion) the deleted one, until a new group of this name replaces
    // it. Null for a name never found.
    GroupPtr group;
    uint64_t sent = 0;   // generation the subscriber holds
    uint64_t known = 0;  // generation the subscriber said it holds
    bool dirty = true;
    // The name has no group; `absent_sent` once GroupRemoved went out.
    bool absent = false;
    bool absent_sent = false;
    v1::GroupRemoved::Cause cause = v1::GroupRemoved::CAUSE_NOT_FOUND;
    uint64_t removed_generation = 0;
    int64_t published_at = 0;
  };

  void Listen(Group& g) {
    g.AddListener(this);
    if (const GroupMetrics* m = g.metrics()) {
      m->watch_subscribers->Increment();
    }
  }
  void Unlisten(Group& g) {
    g.RemoveListener(this);
    if (const GroupMetrics* m = g.metrics()) {
      m->watch_subscribers->Decrement();
    }
  }

  void MarkAbsentLocked(Entry& e, v1::GroupRemoved::Cause cause,
                        uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!e.absent) {
      absent_count_.fetch_add(1, std::memory_order_acq_rel);
    }
    e.absent = true;
    e.absent_sent = false;
    e.cause = cause;
    e.removed_generation = generation;
    e.dirty = true;
  }

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
      if (absl::Status s = ValidateGroupName(name); !s.ok()) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("groups[", i, "]: ", s.message())};
      }
      Entry e;
      e.name = name;
      e.group = hub_->groups_->Find(name);
      if (e.group == nullptr) {
        MarkAbsentLocked(e, v1::GroupRemoved::CAUSE_NOT_FOUND, 0);
      }
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
      if (!e.dirty) {
        continue;
      }
      e.dirty = false;
      const GroupMetrics* gm =
          e.group != nullptr ? e.group->metrics() : nullptr;
      prometheus::Counter* kind = nullptr;
      // The message: gRPC copies it (a reference to its slices) as the
      // write starts, so the shared encodings are written in place.
      grpc::ByteBuffer own;
      const grpc::ByteBuffer* message = &own;
      std::shared_ptr<const EncodedUpdate> update;
      if (e.absent) {
        if (e.absent_sent) {
          continue;
        }
        own = EncodeAbsent(e.name, e.removed_generation, e.cause,
                           hub_->groups_->server_id());
        e.absent_sent = true;
        e.sent = 0;
        e.known = 0;
        kind = gm != nullptr ? gm->watch_removed : nullptr;
      } else {
        update = e.group->Encoded();
        if (update->generation == e.sent) {
          continue;
        }
        if (e.sent == 0 && e.known != 0 && e.known == update->generation) {
          own = EncodeUnchanged(e.group->name(), update->generation,
                                e.group->server_id());
          kind = gm != nullptr ? gm->watch_unchanged : nullptr;
        } else if (const grpc::ByteBuffer* delta =
                       update->DeltaFrom(e.sent != 0 ? e.sent : e.known);
                   delta != nullptr) {
          // From the generation the subscriber holds: the one-step delta,
          // or one combined delta when it is a few generations behind.
          message = delta;
          kind = gm != nullptr ? gm->watch_delta : nullptr;
        } else {
          message = &update->full();
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
      writer_.Write(*message, &write_op_);
      return;
    }
  }

  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) {
      return;
    }
    finished_ = true;
    finishing_ = true;
    writer_.Finish(status, &finish_op_);
  }

  // Whether the done notification and every started operation completed,
  // and the shard's thread holds no reference.
  bool ReleasableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ && !writing_ && !finishing_ && !queued_;
  }

  // Off the shard's thread: has that thread start the next write, if one
  // is due and none is in flight.
  void KickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !subscribed_ || queued_) {
      return;
    }
    queued_ = true;
    Ready(shard_, this);
  }

  // Finishes even with a write stuck in flow control: the status is queued
  // and the call is cancelled so the transport lets go of it.
  void ForceFinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool stuck = writing_;
    FinishLocked(status);
    if (stuck) {
      context_.TryCancel();
    }
  }

  void Unsubscribe() {
    std::vector<GroupPtr> groups;
    {
      aside::MutexLock lock(&mu_);
      if (!subscribed_) {
        return;
      }
      subscribed_ = false;
      for (const Entry& e : entries_) {
        if (e.group != nullptr) {
          groups.push_back(e.group);
        }
      }
    }
    // Not holding mu_: see Start().
    for (const GroupPtr& g : groups) {
      Unlisten(*g);
    }
  }

  WatchHub* const hub_;
  Shard* const shard_;
  Op request_op_{this, Op::kRequest};
  Op write_op_{this, Op::kWrite};
  Op finish_op_{this, Op::kFinish};
  Op done_op_{this, Op::kDone};
  grpc::ServerContext context_;
  // The request; read once, in Start, on the queue's thread.
  grpc::ByteBuffer request_;
  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_;
  // The peer this stream is counted against (empty: not counted). Written
  // once in Start, under the hub's mu_, read under it in OnDone.
  std::string peer_ ABSL_GUARDED_BY(hub_->mu_);
  aside::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Entries that are absent (read by the hub without mu_).
  std::atomic<size_t> absent_count_{0};
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish in flight
  bool done_ ABSL_GUARDED_BY(mu_) = false;       // done notification came
  bool queued_ ABSL_GUARDED_BY(mu_) = false;     // on the shard's ready list
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t write_started_ ABSL_GUARDED_BY(mu_) = 0;
};

WatchHub::WatchHub(GroupRegistry* groups, Metrics* metrics,
                   absl::Duration stall_timeout, uint32_t max_streams_per_peer)
    : groups_(groups),
      metrics_(metrics),
      stall_timeout_(stall_timeout),
      peer_limit_("max_watch_streams_per_peer", "Watch streams",
                  max_streams_per_peer, metrics) {
  groups_->AddObserver(this);
  janitor_ = std::thread([this] {
    NameThisThread("aside-watch-jan");
    Janitor();
  });
}

WatchHub::~WatchHub() {
  // Waits for an announcement in progress, which holds mu_ at times.
  groups_->RemoveObserver(this);
  StopServing();
  {
    aside::MutexLock lock(&mu_);
    stop_janitor_ = true;  // wakes the janitor as the lock is released
  }
  janitor_.join();
}

void WatchHub::AddCompletionQueues(grpc::ServerBuilder& builder, int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    auto shard = std::make_unique<Shard>();
    shard->cq = builder.AddCompletionQueue();
    shards_.push_back(std::move(shard));
  }
}

void WatchHub::Serve(Requester request) {
  request_ = std::move(request);
  serving_ = true;
  for (const auto& shard : shards_) {
    RequestCall(shard.get());
    shard->thread = std::thread([shard = shard.get()] {
      NameThisThread("aside-watch-cq");
      Poll(shard);
    });
  }
}

void WatchHub::RequestCall(Shard* shard) {
  aside::MutexLock lock(&mu_);
  if (stopping_) {
    return;
  }
  ++alive_;
  (new Stream(this, shard))->Request(request_);
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

void WatchHub::Shutdown() {
  std::vector<Stream*> streams;
  aside::MutexLock lock(&mu_);
  shutting_down_ = true;
  // Holding mu_ keeps every stream alive (OnDone erases under mu_).
  for (Stream* s : streams_) {
    s->Shutdown();
  }
}

size_t WatchHub::streams() const {
  aside::MutexLock lock(&mu_);
  return streams_.size();
}

void WatchHub::OnAdded(const GroupPtr& group) {
  aside::MutexLock lock(&mu_);
  for (Stream* s : streams_) {
    if (s->waiting()) {
      s->Reattach(&group->name());
    }
  }
}

void WatchHub::Janitor() {
  const absl::Duration tick = std::min(absl::Seconds(1), stall_timeout_ / 4);
  aside::MutexLock lock(&mu_);
  while (!stop_janitor_) {
    mu_.AwaitWithTimeout(
        [this] {
          mu_.AssertHeld();
          return stop_janitor_;
        },
        tick);
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
