// One Watch stream (watch_stream.h): validating the request, subscribing to
// its groups, writing each group's newest table or delta one write at a
// time, reporting absent groups, stall and shutdown ends, and deciding when
// the stream may be deleted. The hub that runs the streams is watch.cc.
#include "server/api/watch_stream.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/status_util.h"

namespace aside::server {
namespace {

std::vector<grpc::Slice> Slices(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  return slices;
}

bool ParseBuffer(const grpc::ByteBuffer& buffer,
                 google::protobuf::Message* out) {
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

WatchHub::Stream::~Stream() {
  aside::MutexLock lock(&hub_->mu_);
  --hub_->alive_;
}

void WatchHub::Stream::Request(const Requesters& request) {
  context_.AsyncNotifyWhenDone(&done_op_);
  if (writer_.confirmed()) {
    request.confirmed(&context_, writer_.reader_writer(), shard_->cq.get(),
                      &request_op_);
  } else {
    request.watch(&context_, &request_, writer_.writer(), shard_->cq.get(),
                  &request_op_);
  }
}

void WatchHub::Stream::Complete(Op::Kind kind, bool ok) {
  bool release = false;
  switch (kind) {
    case Op::kRequest:
      if (!ok) {
        // The server is shutting down; the call never started, and gRPC
        // sends no done notification for it.
        delete this;
        return;
      }
      hub_->RequestCall(shard_, writer_.confirmed());
      if (writer_.confirmed()) {
        // The request is the first message.
        aside::MutexLock lock(&mu_);
        reading_ = true;
        writer_.Read(&read_, &read_op_);
        return;
      }
      Start();
      return;
    case Op::kRead:
      release = OnReadDone(ok);
      break;
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

void WatchHub::Stream::Start() {
  grpc::Status error;
  std::vector<GroupPtr> groups;
  DrainConfirmations::Subscriber who;
  {
    aside::MutexLock lock(&mu_);
    v1::WatchRequest req;
    error = ParseLocked(&req);
    if (error.ok()) {
      error = ValidateLocked(req);
    }
    request_.Clear();
    read_.Clear();
    for (const Entry& e : entries_) {
      if (e.group != nullptr) {
        groups.push_back(e.group);
      }
    }
    who.name = req.subscriber();
  }
  if (!hub_->streams_.Add(this) && error.ok()) {
    error = ShuttingDownStatus();
  }
  if (error.ok()) {
    error = peer_slot_.Acquire(&hub_->peer_limit_, ClientPeer(context_.peer()));
  }
  if (!error.ok()) {
    aside::MutexLock lock(&mu_);
    FinishLocked(error);
    return;
  }
  if (DrainConfirmations* c = hub_->confirmations_; c != nullptr) {
    // Every name, present or not: a group created later is sent to this
    // stream too.
    who.edge = DrainConfirmations::Edge::kWatch;
    who.peer = context_.peer();
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      e.confirmation = c->Subscribe(e.name, who);
    }
  }
  // Listeners are added without holding mu_ (leaving waits for a
  // publication in progress, which takes it); a publication that comes
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
    ReadNextLocked();
  }
  // A group added between the lookup in ValidateLocked and now was
  // announced while this stream was not subscribed (Reattach ignored it)
  // or not yet in the hub: look absent names up once more. The group is
  // in the registry before it is announced, so either that announcement
  // or this lookup finds it; both run under the stream set's lock, so they
  // never attach the same group twice.
  if (waiting()) {
    hub_->streams_.Locked([this] { Reattach(nullptr); });
  }
}

void WatchHub::Stream::OnPublish(Group& group, const TableConstPtr& /*table*/) {
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

void WatchHub::Stream::OnRemoved(Group& group, uint64_t generation) {
  aside::MutexLock lock(&mu_);
  for (Entry& e : entries_) {
    if (e.group.get() == &group && !e.absent) {
      MarkAbsentLocked(e, v1::GroupRemoved::CAUSE_DELETED, generation);
    }
  }
  KickLocked();
}

bool WatchHub::Stream::OnWriteDone(bool ok) {
  aside::MutexLock lock(&mu_);
  writing_ = false;
  if (ok && write_generation_ != 0 && write_entry_ < entries_.size()) {
    Entry& e = entries_[write_entry_];
    e.written = std::max(e.written, write_generation_);
    ConfirmLocked(e);
  }
  write_generation_ = 0;
  if (!ok) {
    FinishLocked(WriteFailedStatus());
  } else if (end_deferred_at_.has_value()) {
    FinishLocked(ShuttingDownStatus());
  } else {
    WriteNextLocked();
  }
  return ReleasableLocked();
}

bool WatchHub::Stream::OnReadDone(bool ok) {
  bool start = false;
  {
    aside::MutexLock lock(&mu_);
    reading_ = false;
    if (!request_read_) {
      request_read_ = true;
      // Not once the call is over (the done notification, on this same
      // thread, came first): the stream is then never started.
      start = !finished_;
      if (!ok) {
        read_.Clear();  // ParseLocked refuses it
      }
    } else if (ok && !finished_) {
      v1::WatchMessage message;
      if (ParseBuffer(read_, &message) && message.has_applied()) {
        HandleAppliedLocked(message.applied());
      }
      read_.Clear();
      ReadNextLocked();
    }
  }
  if (start) {
    Start();
  }
  aside::MutexLock lock(&mu_);
  return ReleasableLocked();
}

void WatchHub::Stream::ReadNextLocked() {
  if (!writer_.confirmed() || reading_ || finished_) {
    return;
  }
  reading_ = true;
  writer_.Read(&read_, &read_op_);
}

void WatchHub::Stream::HandleAppliedLocked(const v1::Applied& applied) {
  for (Entry& e : entries_) {
    if (e.name != applied.group()) {
      continue;
    }
    // Only what was sent can have been applied.
    if (e.absent || applied.generation() > e.sent) {
      return;
    }
    e.applied = std::max(e.applied, applied.generation());
    ConfirmLocked(e);
    return;
  }
}

void WatchHub::Stream::ConfirmLocked(const Entry& e) {
  if (e.confirmation == nullptr) {
    return;
  }
  if (!writer_.confirmed()) {
    // Watch: a completed write is all an older stub tells.
    e.confirmation->Confirm(e.written);
    return;
  }
  // WatchConfirmed: every update that took a backend out was answered;
  // the ones written since took nothing out.
  if (e.applied >= e.need) {
    e.confirmation->Confirm(std::max(e.applied, e.written));
  }
}

bool WatchHub::Stream::OnDone() {
  {
    aside::MutexLock lock(&mu_);
    finished_ = true;
  }
  if (DrainConfirmations* c = hub_->confirmations_; c != nullptr) {
    aside::MutexLock lock(&mu_);
    for (Entry& e : entries_) {
      if (e.confirmation != nullptr) {
        c->Unsubscribe(*e.confirmation);
        e.confirmation = nullptr;
      }
    }
  }
  Unsubscribe();
  hub_->streams_.Remove(this);
  peer_slot_.Release();
  aside::MutexLock lock(&mu_);
  done_ = true;
  return ReleasableLocked();
}

void WatchHub::Stream::CheckStall(int64_t now, absl::Duration limit) {
  aside::MutexLock lock(&mu_);
  if (end_deferred_at_.has_value()) {
    if (writing_ && !finished_ &&
        now - *end_deferred_at_ >=
            absl::ToInt64Nanoseconds(kShutdownWriteWait)) {
      ForceFinishLocked(ShuttingDownStatus());
    }
    return;
  }
  if (writing_ && !finished_ &&
      now - write_started_ > absl::ToInt64Nanoseconds(limit)) {
    LogThrottled(
        LogLevel::kWarn, "watch.stalled",
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

void WatchHub::Stream::Reattach(const std::string* name) {
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

bool WatchHub::Stream::RunReady() {
  aside::MutexLock lock(&mu_);
  queued_ = false;
  WriteNextLocked();
  return ReleasableLocked();
}

void WatchHub::Stream::Shutdown() {
  aside::MutexLock lock(&mu_);
  if (writing_ && !finished_) {
    end_deferred_at_ = MonotonicNanos();
    return;
  }
  FinishLocked(ShuttingDownStatus());
}

void WatchHub::Stream::Listen(Group& g) {
  g.AddListener(this);
  if (const GroupMetrics* m = g.metrics()) {
    m->watch_subscribers->Increment();
  }
}

void WatchHub::Stream::Unlisten(Group& g) {
  g.RemoveListener(this);
  if (const GroupMetrics* m = g.metrics()) {
    m->watch_subscribers->Decrement();
  }
}

void WatchHub::Stream::MarkAbsentLocked(Entry& e, v1::GroupRemoved::Cause cause,
                                        uint64_t generation) {
  if (!e.absent) {
    absent_count_.fetch_add(1, std::memory_order_acq_rel);
  }
  e.absent = true;
  e.absent_sent = false;
  e.cause = cause;
  e.removed_generation = generation;
  e.dirty = true;
}

grpc::Status WatchHub::Stream::ParseLocked(v1::WatchRequest* req) {
  if (!writer_.confirmed()) {
    if (!ParseBuffer(request_, req)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "request does not parse"};
    }
    return grpc::Status::OK;
  }
  v1::WatchMessage first;
  if (!ParseBuffer(read_, &first)) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "request does not parse"};
  }
  if (!first.has_request()) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "request: the first message must carry the WatchRequest"};
  }
  *req = std::move(*first.mutable_request());
  return grpc::Status::OK;
}

grpc::Status WatchHub::Stream::ValidateLocked(const v1::WatchRequest& r) {
  const v1::WatchRequest* req = &r;
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

void WatchHub::Stream::WriteNextLocked() {
  if (writing_ || finished_ || !subscribed_) {
    return;
  }
  for (size_t step = 0; step < entries_.size(); ++step) {
    Entry& e = entries_[(next_ + step) % entries_.size()];
    if (!e.dirty) {
      continue;
    }
    e.dirty = false;
    const GroupMetrics* gm = e.group != nullptr ? e.group->metrics() : nullptr;
    prometheus::Counter* kind = nullptr;
    // The message: gRPC copies it (a reference to its slices) as the
    // write starts, so the shared encodings are written in place.
    grpc::ByteBuffer own;
    const grpc::ByteBuffer* message = &own;
    std::shared_ptr<const EncodedUpdate> update;
    write_generation_ = 0;
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
      bool confirm = true;
      if (e.sent == 0 && e.known != 0 && e.known == update->generation) {
        own = EncodeUnchanged(e.group->name(), update->generation,
                              e.group->server_id());
        kind = gm != nullptr ? gm->watch_unchanged : nullptr;
      } else if (const grpc::ByteBuffer* delta = update->DeltaFrom(
                     e.sent != 0 ? e.sent : e.known, nullptr, &confirm);
                 delta != nullptr) {
        // From the generation the subscriber holds: the one-step delta,
        // or one combined delta when it is a few generations behind.
        message = delta;
        kind = gm != nullptr ? gm->watch_delta : nullptr;
      } else {
        confirm = true;
        message = &update->full();
        kind = gm != nullptr ? gm->watch_full : nullptr;
      }
      e.sent = update->generation;
      if (confirm) {
        e.need = std::max(e.need, e.sent);
      }
      write_entry_ = static_cast<size_t>(&e - entries_.data());
      write_generation_ = e.sent;
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

void WatchHub::Stream::FinishLocked(const grpc::Status& status) {
  if (finished_) {
    return;
  }
  finished_ = true;
  finishing_ = true;
  writer_.Finish(status, &finish_op_);
}

void WatchHub::Stream::KickLocked() {
  if (writing_ || finished_ || !subscribed_ || queued_) {
    return;
  }
  queued_ = true;
  Ready(shard_, this);
}

void WatchHub::Stream::ForceFinishLocked(const grpc::Status& status) {
  const bool stuck = writing_;
  FinishLocked(status);
  if (stuck) {
    context_.TryCancel();
  }
}

void WatchHub::Stream::Unsubscribe() {
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

}  // namespace aside::server
