// Internal to the Watch hub (watch.h): one Watch stream (WatchHub::Stream)
// and the completion-queue tag of its operations (WatchHub::Op). The hub is
// watch.cc, the stream watch_stream.cc; only they include it.
#ifndef ASIDE_SERVER_API_WATCH_STREAM_H_
#define ASIDE_SERVER_API_WATCH_STREAM_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "aside/v1/lookaside.pb.h"
#include "lib/sync.h"
#include "server/api/watch.h"
#include "server/groups/group_registry.h"

namespace aside::server {

// A completion-queue tag: which operation of which stream completed.
struct WatchHub::Op {
  enum Kind { kRequest, kWrite, kFinish, kDone, kRead };
  Stream* stream;
  Kind kind;
};

// The sending side of either Watch method: Watch's writer, or
// WatchConfirmed's reader-writer (which also reads the subscriber's
// messages). One of the two is made, at construction.
class WatchWriter {
 public:
  WatchWriter(grpc::ServerContext* context, bool confirmed) {
    if (confirmed) {
      bidi_.emplace(context);
    } else {
      writer_.emplace(context);
    }
  }
  bool confirmed() const { return bidi_.has_value(); }
  grpc::ServerAsyncWriter<grpc::ByteBuffer>* writer() { return &*writer_; }
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>*
  reader_writer() {
    return &*bidi_;
  }
  void Write(const grpc::ByteBuffer& message, void* tag) {
    if (bidi_.has_value()) {
      bidi_->Write(message, tag);
    } else {
      writer_->Write(message, tag);
    }
  }
  void Finish(const grpc::Status& status, void* tag) {
    if (bidi_.has_value()) {
      bidi_->Finish(status, tag);
    } else {
      writer_->Finish(status, tag);
    }
  }
  // WatchConfirmed only.
  void Read(grpc::ByteBuffer* message, void* tag) { bidi_->Read(message, tag); }

 private:
  std::optional<grpc::ServerAsyncWriter<grpc::ByteBuffer>> writer_;
  std::optional<
      grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      bidi_;
};

// One Watch or WatchConfirmed call. Thread-safe: publications and group
// (re)appearances arrive on the group publisher's thread, completions on the
// hub thread of the stream's completion queue; everything below serialises on
// mu_.
//
// Life: constructed to request a call (Request); the request's completion
// starts it (Start: validation, peer cap, subscription, first writes); at
// most one write and one Finish are in flight; the done notification
// unsubscribes it and takes it out of the hub; it is deleted once that
// notification and every operation it started have completed.
//
// WatchConfirmed: the request is the first message read (Start follows
// its completion); from then on one read is always in flight, taking the
// subscriber's Applied answers, until the subscriber half-closes or the
// call ends; deletion waits for it as for a write. Each group's confirmed
// generation goes to the hub's DrainConfirmations (see there for what it
// means on either method). All of a
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
  // `confirmed`: a WatchConfirmed call, else Watch.
  Stream(WatchHub* hub, Shard* shard, bool confirmed)
      : hub_(hub), shard_(shard), writer_(&context_, confirmed) {}
  ~Stream() override;

  void Request(const Requesters& request);

  // On the queue's thread.
  void Complete(Op::Kind kind, bool ok);

  void Start();

  void OnPublish(Group& group, const TableConstPtr& table) override;

  void OnRemoved(Group& group, uint64_t generation) override;

  // The write completed: the next one starts. True when the stream may
  // go.
  bool OnWriteDone(bool ok);

  // WatchConfirmed: a read completed (the request, or an answer). True
  // when the stream may go.
  bool OnReadDone(bool ok);

  // The call is over (finished, or cancelled by the peer, a deadline, the
  // connection's end or the server): no more writes. True when the stream
  // may go.
  bool OnDone();

  // Janitor: ends the stream if a write has been stuck for too long, or,
  // once Shutdown deferred its end, if its write is still in flight
  // kShutdownWriteWait later.
  void CheckStall(int64_t now, absl::Duration limit);

  // Whether some requested name has no group (the hub then calls Reattach
  // when a group is added).
  bool waiting() const {
    return absent_count_.load(std::memory_order_acquire) > 0;
  }

  // With the hub's stream set locked (which keeps this stream alive and
  // serialises Reattach calls): for every absent name (or only `name`, when
  // given) that now has a group, listens to that group and queues its full
  // table.
  void Reattach(const std::string* name);

  // On the shard's thread, taken off its ready list: starts the next write.
  // True when the stream may go.
  bool RunReady();

  // Ends the stream UNAVAILABLE. With a write in flight the end waits for
  // its completion, which has usually been sent already (cancelling then
  // would let CANCELLED overtake the status); the janitor cancels a write
  // that is still in flight at its next tick.
  void Shutdown();
  static constexpr absl::Duration kShutdownWriteWait = absl::Milliseconds(100);

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
    // Confirmations (DrainConfirmations): the newest generation written
    // (its write completed), the newest sent with `confirm` set, and the
    // newest the subscriber answered Applied for (WatchConfirmed).
    uint64_t written = 0;
    uint64_t need = 0;
    uint64_t applied = 0;
    // The name's place there (null: none kept, or the stream is done).
    DrainConfirmations::SubscriptionPtr confirmation;
  };

  void Listen(Group& g);
  void Unlisten(Group& g);

  void MarkAbsentLocked(Entry& e, v1::GroupRemoved::Cause cause,
                        uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The request: Watch's, or WatchConfirmed's first message.
  grpc::Status ParseLocked(v1::WatchRequest* req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  grpc::Status ValidateLocked(const v1::WatchRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // WatchConfirmed: the next read, unless the call is over.
  void ReadNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleAppliedLocked(const v1::Applied& applied)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the hub's confirmations what `e` has confirmed now.
  void ConfirmLocked(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts the next write if none is in flight: the next dirty group in
  // round-robin order, with the newest state of that group.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whether the done notification and every started operation completed,
  // and the shard's thread holds no reference.
  bool ReleasableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ && !writing_ && !finishing_ && !queued_ && !reading_;
  }

  // Off the shard's thread: has that thread start the next write, if one
  // is due and none is in flight.
  void KickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Finishes even with a write stuck in flow control: the status is queued
  // and the call is cancelled so the transport lets go of it.
  void ForceFinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Unsubscribe();

  WatchHub* const hub_;
  Shard* const shard_;
  Op request_op_{this, Op::kRequest};
  Op write_op_{this, Op::kWrite};
  Op finish_op_{this, Op::kFinish};
  Op done_op_{this, Op::kDone};
  Op read_op_{this, Op::kRead};
  grpc::ServerContext context_;
  // The request; read once, in Start, on the queue's thread (Watch).
  grpc::ByteBuffer request_;
  WatchWriter writer_;
  // WatchConfirmed: the message being read (the request first).
  grpc::ByteBuffer read_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool request_read_ ABSL_GUARDED_BY(mu_) = false;
  // The entry whose write is in flight, its generation (0: none, or a
  // GroupRemoved).
  size_t write_entry_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t write_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The stream's place under the per-peer limit: taken once in Start and
  // given back in OnDone, both on the queue's thread.
  PeerStreamLimit::Slot peer_slot_;
  aside::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Entries that are absent (read by the hub without mu_).
  std::atomic<size_t> absent_count_{0};
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish in flight
  // When (MonotonicNanos) Shutdown came while a write was in flight: the
  // stream ends after that write.
  std::optional<int64_t> end_deferred_at_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;    // done notification came
  bool queued_ ABSL_GUARDED_BY(mu_) = false;  // on the shard's ready list
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t write_started_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_WATCH_STREAM_H_
