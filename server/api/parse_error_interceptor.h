// Unary requests whose bytes do not parse as the method's request message.
//
// gRPC's callback API answers such a call with UNIMPLEMENTED and an empty
// message, as if the method did not exist. This interceptor (installed on
// the server's unary methods only: streaming calls parse their own
// requests, or see a bad message as the end of the stream) turns that
// answer into INVALID_ARGUMENT naming the message type, e.g.
//   request: the bytes do not parse as aside.v1.PickRequest
// Calls that parse are only passed through.
//
// The factory also counts the calls in flight (CallsInFlight), so that a
// shutdown can wait for them and not for connections whose clients do not
// read.
#ifndef ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_
#define ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::server {

// Calls in flight on a server, unary and streaming. Thread-safe.
class CallsInFlight {
 public:
  void Begin(bool unary) {
    aside::MutexLock lock(&mu_);
    ++calls_;
    unary_ += unary ? 1 : 0;
  }
  void End(bool unary) {
    aside::MutexLock lock(&mu_);
    --calls_;
    unary_ -= unary ? 1 : 0;
  }
  // Wait until no unary call (or no call at all) is in flight, for at most
  // `timeout`; whether none is.
  bool WaitForNoUnary(absl::Duration timeout) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return unary_ == 0; },
        timeout);
  }
  bool WaitForNone(absl::Duration timeout) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ == 0; },
        timeout);
  }

 private:
  aside::Mutex mu_;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unary_ ABSL_GUARDED_BY(mu_) = 0;
};

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `calls` (may be null) counts the calls; it outlives the server.
  explicit ParseErrorInterceptorFactory(CallsInFlight* calls = nullptr)
      : calls_(calls) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  CallsInFlight* const calls_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_
