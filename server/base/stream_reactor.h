// The end of a server stream, shared by the streaming services' reactors
// (grpclb, xDS ADS and LRS, the fleet's LoadView, the health service's
// Watch; the Watch service's streams run on completion queues instead).
//
// gRPC takes exactly one Finish per reactor, while a stream can end from
// several threads at once: its read or write failing, the client
// cancelling, its group removed, the server shutting down.
// StreamReactor<Base> (Base: grpc::ServerBidiReactor<Request, Response> or
// grpc::ServerWriteReactor<Response>) is the reactor with that rule built
// in: FinishLocked finishes once, ForceFinishLocked also cancels the call
// when a write is in flight (a client that stopped reading would otherwise
// hold the stream, and its OnDone, forever), OnCancel finishes CANCELLED and
// Shutdown (StreamSet's call) finishes UNAVAILABLE: at once, or when a write
// is in flight once it completes (WriteDoneLocked), so that the client gets
// UNAVAILABLE and not a cancellation that overtakes it. A write that never
// completes (a client that stopped reading) ends with the server's drain
// deadline, when gRPC cancels every call still open.
//
// Thread rules: mu_ guards the stream's own state too (derived members are
// ABSL_GUARDED_BY(mu_)); it is taken after the service's StreamSet lock,
// never before. O(1) per call.
#ifndef ASIDE_SERVER_BASE_STREAM_REACTOR_H_
#define ASIDE_SERVER_BASE_STREAM_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"
#include "server/base/status_util.h"

namespace aside::server {

template <typename Base>
class StreamReactor : public Base {
 public:
  void OnCancel() override {
    aside::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  // The service is shutting down (StreamSet::Shutdown, with the set's lock
  // held).
  void Shutdown() {
    aside::MutexLock lock(&mu_);
    if (writing_) {
      end_after_write_ = true;
      return;
    }
    FinishLocked(ShuttingDownStatus());
  }

 protected:
  // `context` is cancelled by ForceFinishLocked; null for a stream that
  // has none (then a stuck write ends with the client's connection).
  explicit StreamReactor(grpc::CallbackServerContext* context)
      : context_(context) {}

  // Finishes with `status` unless the stream finished already.
  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finished_) {
      finished_ = true;
      this->Finish(status);
    }
  }

  // Finishes with `status` and, when a write is in flight, cancels the
  // call so that the write completes (OnWriteDone(false)).
  void ForceFinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool stuck = writing_;
    FinishLocked(status);
    if (stuck && context_ != nullptr) {
      context_->TryCancel();
    }
  }

  // A write completed (OnWriteDone): clears writing_; when it failed, or
  // a shutdown waited for it, finishes the stream and returns false (write
  // nothing more).
  bool WriteDoneLocked(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = false;
    if (!ok) {
      FinishLocked(WriteFailedStatus());
      return false;
    }
    if (end_after_write_) {
      FinishLocked(ShuttingDownStatus());
      return false;
    }
    return true;
  }

  bool finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_; }

  grpc::CallbackServerContext* const context_;
  mutable aside::Mutex mu_;
  // A write is in flight: set by the derived stream before StartWrite,
  // cleared in its OnWriteDone.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;

 private:
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Shutdown came while a write was in flight: end when it completes.
  bool end_after_write_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_STREAM_REACTOR_H_
