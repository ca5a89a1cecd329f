// rpc_load: closed-loop load on one unary RPC of a running aside-server from
// a separate process, with several calls in flight, reporting throughput and
// latency percentiles as JSON. Compares Pick with an empty unary RPC on the
// same server (grpc.health.v1.Health/Check for the server, "").
//
//   rpc_load --target 127.0.0.1:50051 --method pick|empty --group demo
//            --concurrency 16 --seconds 5 --warmup 1
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "bench/load/latency.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/command_line.h"
#include "lib/json.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address");
ABSL_FLAG(std::string, method, "pick", "pick or empty (grpc.health.v1 Check)");
ABSL_FLAG(std::string, group, "demo", "group to pick from");
ABSL_FLAG(int, concurrency, 16, "calls in flight");
ABSL_FLAG(double, seconds, 5, "measured time");
ABSL_FLAG(double, warmup, 1, "time before measuring");

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: rpc_load --target HOST:PORT --method pick|empty [--group G] "
    "[--concurrency N] [--seconds S] [--warmup S]\n";

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string method = "pick";
  std::string group = "demo";
  int concurrency = 16;
  double seconds = 5;
  double warmup = 1;
};

// One call slot: issues a call, and on completion the next one, until the
// deadline.
class Caller {
 public:
  Caller(const Options& o, aside::v1::LoadBalancer::Stub* lb,
         grpc::health::v1::Health::Stub* health, grpc::CompletionQueue* cq)
      : options_(o), lb_(lb), health_(health), cq_(cq) {
    pick_.set_group(o.group);
  }

  void Start() {
    context_ = std::make_unique<grpc::ClientContext>();
    start_ = Clock::now();
    if (options_.method == "pick") {
      pick_reader_ = lb_->AsyncPick(context_.get(), pick_, cq_);
      pick_reader_->Finish(&pick_response_, &status_, this);
    } else {
      health_reader_ = health_->AsyncCheck(context_.get(), check_, cq_);
      health_reader_->Finish(&check_response_, &status_, this);
    }
  }

  // Returns the latency of the call that just completed.
  int64_t Done(bool* ok) {
    *ok = status_.ok();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                                start_)
        .count();
  }
  const grpc::Status& status() const { return status_; }

 private:
  const Options& options_;
  aside::v1::LoadBalancer::Stub* lb_;
  grpc::health::v1::Health::Stub* health_;
  grpc::CompletionQueue* cq_;
  std::unique_ptr<grpc::ClientContext> context_;
  Clock::time_point start_;
  grpc::Status status_;
  aside::v1::PickRequest pick_;
  aside::v1::PickResponse pick_response_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<aside::v1::PickResponse>>
      pick_reader_;
  grpc::health::v1::HealthCheckRequest check_;
  grpc::health::v1::HealthCheckResponse check_response_;
  std::unique_ptr<
      grpc::ClientAsyncResponseReader<grpc::health::v1::HealthCheckResponse>>
      health_reader_;
};

bool ParseArgs(int argc, char** argv, Options* o) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::cerr << "rpc_load: " << args.status().message() << "\n";
    return false;
  }
  o->target = absl::GetFlag(FLAGS_target);
  o->method = absl::GetFlag(FLAGS_method);
  o->group = absl::GetFlag(FLAGS_group);
  o->concurrency = absl::GetFlag(FLAGS_concurrency);
  o->seconds = absl::GetFlag(FLAGS_seconds);
  o->warmup = absl::GetFlag(FLAGS_warmup);
  return (o->method == "pick" || o->method == "empty") && o->concurrency > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseArgs(argc, argv, &options)) {
    std::cerr << kUsage;
    return 2;
  }
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto channel = grpc::CreateCustomChannel(
      options.target, grpc::InsecureChannelCredentials(), args);
  auto lb = aside::v1::LoadBalancer::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Caller>> callers;
  for (int i = 0; i < options.concurrency; ++i) {
    callers.push_back(
        std::make_unique<Caller>(options, lb.get(), health.get(), &cq));
  }
  const auto start = Clock::now();
  const auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(options.warmup));
  const auto end =
      measure_from + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options.seconds));
  for (auto& c : callers) {
    c->Start();
  }
  aside::bench::Samples samples;
  uint64_t errors = 0;
  std::string first_error;
  int outstanding = options.concurrency;
  void* tag;
  bool ok;
  while (outstanding > 0 && cq.Next(&tag, &ok)) {
    auto* caller = static_cast<Caller*>(tag);
    bool rpc_ok = false;
    const int64_t nanos = caller->Done(&rpc_ok);
    const auto now = Clock::now();
    if (now >= measure_from && now < end) {
      if (rpc_ok) {
        samples.Add(nanos);
      } else {
        if (errors++ == 0) first_error = caller->status().error_message();
      }
    }
    if (now < end) {
      caller->Start();
    } else {
      --outstanding;
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  const double qps = static_cast<double>(samples.size()) / options.seconds;
  std::printf(
      "{\"method\":\"%s\",\"concurrency\":%d,\"seconds\":%.1f,\"calls\":%zu,"
      "\"errors\":%llu,\"qps\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,"
      "\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f%s}\n",
      options.method.c_str(), options.concurrency, options.seconds,
      samples.size(), static_cast<unsigned long long>(errors), qps,
      samples.PercentileMicros(50), samples.PercentileMicros(90),
      samples.PercentileMicros(99), samples.PercentileMicros(99.9),
      samples.MaxMicros(),
      first_error.empty()
          ? ""
          : absl::StrCat(",\"first_error\":", aside::JsonString(first_error))
                .c_str());
  return errors > 0 && samples.size() == 0 ? 1 : 0;
}
