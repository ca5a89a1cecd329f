// Backends for the grpclb tests: real gRPC servers on 127.0.0.1 ports
// serving helloworld.Greeter, which record every call they serve (the
// caller's name, the backend, and the `lb-token` metadata the stock client
// sent) in one CallLog the test reads and waits on.
#ifndef ASIDE_TESTS_GRPCLB_GREETER_BACKENDS_H_
#define ASIDE_TESTS_GRPCLB_GREETER_BACKENDS_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::testing {

// Every call served by the test backends, per caller in arrival order.
// Callers (the stock clients) make one call at a time, so a caller's
// entries are its calls in the order it made them.
//
// Thread-safe: the backends' server threads record, the test thread reads
// and waits. Recording is a map lookup and a push.
class CallLog {
 public:
  // Caller name -> backend index of each call, in order.
  using Calls = std::map<std::string, std::vector<int>>;

  void Record(const std::string& caller, int backend, std::string lb_token);

  // Calls made by `caller` so far.
  size_t Count(const std::string& caller) const;
  // The backends of `caller`'s calls from position `from` on.
  std::vector<int> CallsSince(const std::string& caller, size_t from) const;
  // The distinct lb-token values `backend` received.
  std::set<std::string> Tokens(int backend) const;

  // Waits until `done(calls)` holds, re-checking after every recorded call;
  // false after `timeout`. `done` runs with the log locked: keep it short.
  bool WaitUntil(const std::function<bool(const Calls&)>& done,
                 absl::Duration timeout) const;
  // Waits until `caller` has made at least `count` calls.
  bool WaitForCount(const std::string& caller, size_t count,
                    absl::Duration timeout) const;

 private:
  mutable Mutex mu_;
  Calls calls_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::set<std::string>> tokens_ ABSL_GUARDED_BY(mu_);
};

// N Greeter servers, each on its own 127.0.0.1 port picked by the kernel.
// Each reply's message names the backend ("backend-<i>"). Each also serves
// the standard grpc.health.v1 service (SERVING until SetServing(i, false)),
// so a group can probe them with a gRPC health check. Started and stopped
// from the test thread; calls are served on gRPC's threads.
class GreeterBackends {
 public:
  // With `extra`, backend i also serves extra(i) (which must outlive the
  // backends), e.g. an ORCA service.
  static absl::StatusOr<std::unique_ptr<GreeterBackends>> Start(
      int count, CallLog* log,
      const std::function<grpc::Service*(int)>& extra = nullptr);
  ~GreeterBackends();

  int port(int i) const { return ports_[i]; }
  // "127.0.0.1:<port>", the address Aside lists and tokens name.
  std::string address(int i) const;
  // What backend i's health service answers from now on (every service
  // name, the empty one included).
  void SetServing(int i, bool serving);
  // With `failing`, backend i answers every call with UNAVAILABLE (still
  // logging it).
  void SetFailing(int i, bool failing);

 private:
  class Greeter;
  GreeterBackends() = default;

  std::vector<std::unique_ptr<Greeter>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<int> ports_;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_GRPCLB_GREETER_BACKENDS_H_
