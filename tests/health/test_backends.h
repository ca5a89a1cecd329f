// Loopback backends for the health tests, each on its own thread, started
// and stopped by the test: a TCP/HTTP fake (accept-and-close, black hole, or
// an HTTP server with scripted replies), a real gRPC server with a scripted
// grpc.health.v1 service, and a recorder of the registry's probe results
// that tests wait on (bounded) instead of sleeping.
#ifndef ASIDE_TESTS_HEALTH_TEST_BACKENDS_H_
#define ASIDE_TESTS_HEALTH_TEST_BACKENDS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/sync.h"
#include "server/health/health_registry.h"

namespace aside::testing {

// A TCP server on loopback addresses. Thread-safe: behaviour and counters
// may be changed and read from any thread while it runs.
class FakeBackend {
 public:
  enum class Mode {
    kAcceptClose,  // accept, then close at once (a TCP health endpoint)
    kBlackHole,    // accept, read and discard, never answer
    kHttp,         // answer every request as the HttpReply says
  };
  enum class HttpKind {
    kStatus,       // "HTTP/1.1 <status> X" with a 2-byte body
    kRaw,          // `raw` verbatim, then close
    kHugeHeader,   // 200 with a 1 MiB header block
    kEndlessBody,  // 200 with a chunked body that never ends
    // 200 with a chunked body that sends 512 KiB (half the largest body
    // limit) and then stalls: it neither ends nor exceeds a limit, so the
    // probe is still reading it until its timeout.
    kStalledBody,
  };
  struct HttpReply {
    HttpKind kind = HttpKind::kStatus;
    int status = 200;
    std::string raw;
  };
  // What one HTTP request looked like and what it got.
  struct Request {
    std::string request_line;
    std::string host;
    int status = 0;
  };

  explicit FakeBackend(Mode mode);
  ~FakeBackend();  // Stop()
  FakeBackend(const FakeBackend&) = delete;
  FakeBackend& operator=(const FakeBackend&) = delete;

  // Listens on `ip`:`port` (0: any free port) with `backlog`; returns the
  // port. Call before or while running.
  absl::StatusOr<uint16_t> Listen(const std::string& ip = "127.0.0.1",
                                  uint16_t port = 0, int backlog = 1024);
  // Closes every listener and connection and joins the thread.
  void Stop();

  void SetMode(Mode mode) { mode_.store(mode); }
  void SetReply(const HttpReply& reply);
  void SetStatus(int status) { status_.store(status); }

  uint64_t accepted() const { return accepted_.load(); }
  uint64_t requests() const { return requests_.load(); }
  uint64_t open_connections() const { return open_.load(); }
  uint64_t max_open_connections() const { return max_open_.load(); }
  std::vector<Request> requests_seen() const;
  // Waits until accepted() >= n; false after `timeout`.
  bool WaitForAccepted(uint64_t n, absl::Duration timeout);
  bool WaitForRequests(uint64_t n, absl::Duration timeout);

  class Impl;

 private:
  friend class Impl;
  void Counted();

  std::atomic<Mode> mode_;
  std::atomic<int> status_{200};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> open_{0};
  std::atomic<uint64_t> max_open_{0};
  mutable aside::Mutex mu_;
  HttpReply reply_;  // guarded by mu_ (status_ overrides reply_.status)
  std::vector<Request> seen_;  // guarded by mu_
  std::unique_ptr<Impl> impl_;
};

// grpc.health.v1.Health with scripted answers: per service an enum value
// (any int, to send values outside the enum), NOT_FOUND for services not
// set, or no answer at all while hanging.
class ScriptedHealthService final
    : public grpc::health::v1::Health::CallbackService {
 public:
  ~ScriptedHealthService() override;
  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;

  void Set(const std::string& service, int status);
  // While hanging, Check calls are held without an answer.
  void SetHang(bool hang);
  // Answers every held call with CANCELLED.
  void ReleaseHeld();
  uint64_t checks() const { return checks_.load(); }
  bool WaitForChecks(uint64_t n, absl::Duration timeout);

 private:
  std::atomic<uint64_t> checks_{0};
  mutable aside::Mutex mu_;
  std::map<std::string, int> statuses_;
  bool hang_ = false;
  std::vector<grpc::ServerUnaryReactor*> held_;
};

// A gRPC server on 127.0.0.1, with or without the health service.
class GrpcBackend {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcBackend>> Start(
      bool with_health_service);
  ~GrpcBackend();
  int port() const { return port_; }
  std::string address() const;
  ScriptedHealthService& health() { return health_; }

 private:
  GrpcBackend() = default;
  ScriptedHealthService health_;
  // Some other service (every method UNIMPLEMENTED) for a server without
  // the health service.
  aside::v1::LoadBalancer::CallbackService other_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Records every probe result of a registry; tests wait on it.
class ProbeRecorder {
 public:
  struct Event {
    server::ProbeEvent event;
    int64_t seen_nanos = 0;  // monotonic time it was recorded
  };
  explicit ProbeRecorder(server::HealthRegistry& registry);
  ~ProbeRecorder();

  // Waits until `done(events)` holds; false after `timeout`.
  bool WaitUntil(const std::function<bool(const std::vector<Event>&)>& done,
                 absl::Duration timeout);
  // Waits for the `n`-th result of `target_id` (1-based) and returns it.
  absl::StatusOr<server::ProbeEvent> WaitForResult(uint64_t target_id, size_t n,
                                                   absl::Duration timeout);
  std::vector<Event> EventsFor(uint64_t target_id) const;
  std::vector<Event> events() const;
  size_t CountFor(uint64_t target_id) const;

 private:
  server::HealthRegistry& registry_;
  mutable aside::Mutex mu_;
  std::vector<Event> events_;
};

// Open file descriptors of this process (/proc/self/fd).
int CountOpenFds();
// Raises RLIMIT_NOFILE's soft limit to at least `wanted` if the hard limit
// allows; returns the soft limit now in force.
uint64_t RaiseFdLimit(uint64_t wanted);

}  // namespace aside::testing

#endif  // ASIDE_TESTS_HEALTH_TEST_BACKENDS_H_
