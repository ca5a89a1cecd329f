// A helloworld Greeter backend process for the deploy tests: what a pod's
// process is to a rolling deploy. It serves on --listen (port 0: the
// kernel picks one, logged), takes --latency_ms to serve each call,
// counts every caller's calls (the caller is
// HelloRequest.name) and tells the test, on stderr:
//
//   event=greeter.listening port=P
//   event=served now_ns=T calls=NAME:COUNT:LAST_NS,NAME:COUNT:LAST_NS,...
//
// the second line every --report_ms: each caller's count and the time of
// its last call, as of now_ns (a line whose counts did not change still
// says that nothing arrived until now_ns). Times are CLOCK_MONOTONIC
// nanoseconds (std::chrono::steady_clock), one clock for every process of
// the machine, so the test can compare them with its own.
//
// It has no shutdown of its own: a rolling deploy's backend exits at once
// on SIGTERM, and the test stops it with SIGKILL, so that a call still on
// its way fails as it would in production.
//
// Threads: gRPC's serve calls (a map update under one lock per call); one
// thread writes the reports.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpc/examples/helloworld.grpc.pb.h"
#include "lib/command_line.h"
#include "lib/sync.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC address");
ABSL_FLAG(int, report_ms, 50, "interval of the event=served lines");
ABSL_FLAG(int, latency_ms, 0, "time each call takes to serve");

namespace {

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct CallerCalls {
  uint64_t count = 0;
  int64_t last_nanos = 0;
};

// Called on gRPC's threads; Report() on the reporter thread.
class Greeter final : public helloworld::Greeter::Service {
 public:
  explicit Greeter(std::chrono::milliseconds latency) : latency_(latency) {}
  void set_port(int port) { port_.store(port); }

  grpc::Status SayHello(grpc::ServerContext*,
                        const helloworld::HelloRequest* request,
                        helloworld::HelloReply* reply) override {
    {
      aside::MutexLock lock(&mu_);
      CallerCalls& calls = callers_[request->name()];
      ++calls.count;
      calls.last_nanos = MonotonicNanos();
    }
    // The work: a call is in flight for this long, so that a backend
    // stopped while it is still called fails calls.
    std::this_thread::sleep_for(latency_);
    reply->set_message(absl::StrCat("backend ", port_.load()));
    return grpc::Status::OK;
  }

  // Writes one event=served line.
  void Report() {
    std::string line;
    {
      aside::MutexLock lock(&mu_);
      line = absl::StrCat("event=served now_ns=", MonotonicNanos(), " calls=");
      const char* separator = "";
      for (const auto& [name, calls] : callers_) {
        absl::StrAppend(&line, separator, name, ":", calls.count, ":",
                        calls.last_nanos);
        separator = ",";
      }
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

 private:
  const std::chrono::milliseconds latency_;
  std::atomic<int> port_{0};  // set once the server has bound it
  aside::Mutex mu_;
  std::map<std::string, CallerCalls> callers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args = aside::ParseCommandLine(
          argc, argv,
          {.usage = "usage: deploy_backend [--listen HOST:PORT] "
                    "[--report_ms MS] [--latency_ms MS]\n"});
      !args.ok()) {
    std::fprintf(stderr, "deploy_backend: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const auto interval =
      std::chrono::milliseconds(absl::GetFlag(FLAGS_report_ms));
  Greeter greeter(std::chrono::milliseconds(absl::GetFlag(FLAGS_latency_ms)));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&greeter);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "deploy_backend: cannot listen on %s\n",
                 listen.c_str());
    return 1;
  }
  greeter.set_port(port);
  std::fprintf(stderr, "event=greeter.listening port=%d\n", port);
  std::fflush(stderr);
  // Runs until killed.
  while (true) {
    std::this_thread::sleep_for(interval);
    greeter.Report();
  }
}
