// fanout_load: N Watch subscribers in this process, one change at a time
// made through Admin; for each change, the time until the last subscriber
// has it, and the server's CPU per stream per update. JSON on stdout.
//
//   fanout_load --target 127.0.0.1:50051 --token TOKEN --subscribers 1000
//               --changes 30 --server-pid PID [--channels 20]
//
// Several processes can share one run (many subscribers on one server):
// one drives with --coordinate, the others only subscribe with --observe.
// Both print {"ready":true} once every stream holds the first table. The
// driver then waits for a line on stdin before its first change, prints
// {"generation":G,"t0_ns":T,"last_ns":L} after each change (steady-clock
// nanoseconds: when the change was made, when its own last subscriber
// had it) and waits for a line before it reads the server's CPU and goes
// on. An observer answers each generation G read from stdin with
// {"generation":G,"last_ns":L} once all its streams hold G, and ends on
// "stop" or end of input.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "bench/load/latency.h"
#include "lib/command_line.h"
#include "lib/sync.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address");
ABSL_FLAG(std::string, token, "", "Admin bearer token");
ABSL_FLAG(std::string, group, "fanout", "group to create and change");
ABSL_FLAG(int, subscribers, 100, "Watch streams");
ABSL_FLAG(int, changes, 20, "changes to publish");
ABSL_FLAG(int, channels, 20, "channels the streams share");
ABSL_FLAG(int, server_pid, 0, "the server's pid, for its CPU time");
ABSL_FLAG(bool, coordinate, false,
          "drive the changes in step with observers (see the header)");
ABSL_FLAG(bool, observe, false,
          "only subscribe to --group and report arrivals (see the header)");

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: fanout_load --target HOST:PORT --token T --subscribers N "
    "--changes K --server-pid PID [--channels C]\n";

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string token;
  std::string group = "fanout";
  int subscribers = 100;
  int changes = 20;
  int channels = 20;
  int server_pid = 0;
  bool coordinate = false;
  bool observe = false;
};

// One Watch stream; remembers when each generation arrived.
class Subscriber final
    : public grpc::ClientReadReactor<aside::v1::GroupUpdate> {
 public:
  Subscriber(aside::v1::LoadBalancer::Stub* stub, const std::string& group) {
    request_.add_groups(group);
    stub->async()->Watch(&context_, &request_, this);
    StartRead(&update_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      return;
    }
    {
      aside::MutexLock lock(&mu_);
      arrivals_.emplace_back(update_.generation(), Clock::now());
    }
    bytes_.store(update_.ByteSizeLong(), std::memory_order_relaxed);
    latest_.store(update_.generation(), std::memory_order_release);
    StartRead(&update_);
  }

  void OnDone(const grpc::Status& status) override {
    aside::MutexLock lock(&mu_);
    done_ = true;
    status_ = status;
  }

  uint64_t latest() const { return latest_.load(std::memory_order_acquire); }
  // Serialised size of the latest update.
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

  // When the first update at or past `generation` arrived.
  Clock::time_point ArrivalOf(uint64_t generation) {
    aside::MutexLock lock(&mu_);
    for (const auto& [g, t] : arrivals_) {
      if (g >= generation) {
        return t;
      }
    }
    return Clock::time_point::max();
  }

  void Cancel() { context_.TryCancel(); }
  bool done() {
    aside::MutexLock lock(&mu_);
    return done_;
  }
  grpc::Status status() {
    aside::MutexLock lock(&mu_);
    return status_;
  }

 private:
  grpc::ClientContext context_;
  aside::v1::WatchRequest request_;
  aside::v1::GroupUpdate update_;
  std::atomic<uint64_t> latest_{0};
  std::atomic<size_t> bytes_{0};
  aside::Mutex mu_;
  std::vector<std::pair<uint64_t, Clock::time_point>> arrivals_
      ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

bool ParseArgs(int argc, char** argv, Options* o) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::cerr << "fanout_load: " << args.status().message() << "\n";
    return false;
  }
  o->target = absl::GetFlag(FLAGS_target);
  o->token = absl::GetFlag(FLAGS_token);
  o->group = absl::GetFlag(FLAGS_group);
  o->subscribers = absl::GetFlag(FLAGS_subscribers);
  o->changes = absl::GetFlag(FLAGS_changes);
  o->channels = absl::GetFlag(FLAGS_channels);
  o->server_pid = absl::GetFlag(FLAGS_server_pid);
  o->coordinate = absl::GetFlag(FLAGS_coordinate);
  o->observe = absl::GetFlag(FLAGS_observe);
  return o->subscribers > 0 && o->changes > 0 && o->channels > 0;
}

std::unique_ptr<grpc::ClientContext> AdminContext(const Options& o) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  c->AddMetadata("authorization", "Bearer " + o.token);
  return c;
}

// Ends the run once Watch streams are open: the streams' reactors must not
// be destroyed while their calls run, and a stream that hangs would keep a
// cancellation from finishing, so the process leaves without unwinding.
[[noreturn]] void Fail(const std::string& why) {
  std::cerr << "fanout_load: " << why << "\n";
  std::_Exit(1);
}

// Waits (bounded) until every subscriber holds `generation`; fails the run
// when the wait times out or a stream ended.
void WaitAll(std::vector<std::unique_ptr<Subscriber>>& subs,
             uint64_t generation, std::chrono::seconds timeout,
             const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < subs.size(); ++i) {
    Subscriber& s = *subs[i];
    while (s.latest() < generation) {
      if (s.done()) {
        Fail(absl::StrCat(what, ": subscriber ", i,
                          "'s stream ended: ", s.status().error_message()));
      }
      if (Clock::now() > deadline) {
        Fail(absl::StrCat(what, ": subscriber ", i, " still at generation ",
                          s.latest(), " after ", timeout.count(), " s"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

int64_t SteadyNanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

// When the last of `subs` had `generation`.
int64_t LastArrival(std::vector<std::unique_ptr<Subscriber>>& subs,
                    uint64_t generation) {
  Clock::time_point last = Clock::time_point::min();
  for (auto& sub : subs) {
    last = std::max(last, sub->ArrivalOf(generation));
  }
  return SteadyNanos(last);
}

// A line from the run's coordinator; false at end of input.
bool ReadLine(std::string* line) {
  return static_cast<bool>(std::getline(std::cin, *line));
}

void PrintLine(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::cerr << kUsage;
    return 2;
  }
  auto admin = aside::v1::Admin::NewStub(
      grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials()));
  // A group of 100 backends, created fresh (by the driver).
  if (!o.observe) {
    aside::v1::DeleteGroupRequest del;
    del.set_name(o.group);
    aside::v1::DeleteGroupResponse deleted;
    (void)admin->DeleteGroup(AdminContext(o).get(), del, &deleted);
    aside::v1::CreateGroupRequest create;
    create.mutable_group()->set_name(o.group);
    create.mutable_group()->mutable_health_check()->set_kind(
        aside::v1::HealthCheck::NONE);
    for (int i = 0; i < 100; ++i) {
      create.mutable_group()->add_backends()->set_address(
          absl::StrCat("10.9.", i / 250, ".", i % 250 + 1, ":8080"));
    }
    aside::v1::Group g;
    grpc::Status s = admin->CreateGroup(AdminContext(o).get(), create, &g);
    if (!s.ok()) {
      std::cerr << "create group: " << s.error_message() << "\n";
      return 1;
    }
  }
  std::vector<std::unique_ptr<aside::v1::LoadBalancer::Stub>> stubs;
  for (int i = 0; i < o.channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    stubs.push_back(aside::v1::LoadBalancer::NewStub(grpc::CreateCustomChannel(
        o.target, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (int i = 0; i < o.subscribers; ++i) {
    subs.push_back(std::make_unique<Subscriber>(
        stubs[static_cast<size_t>(i) % stubs.size()].get(), o.group));
  }
  WaitAll(subs, 1, std::chrono::seconds(120), "first table");
  std::string line;
  if (o.observe) {
    PrintLine("{\"ready\":true}");
    while (ReadLine(&line) && line != "stop") {
      const uint64_t generation = std::stoull(line);
      WaitAll(subs, generation, std::chrono::seconds(120),
              absl::StrCat("generation ", generation));
      PrintLine(absl::StrCat("{\"generation\":", generation, ",\"last_ns\":",
                             LastArrival(subs, generation), "}"));
    }
    std::_Exit(0);  // see Fail
  }
  if (o.coordinate) {
    PrintLine("{\"ready\":true}");
    if (!ReadLine(&line)) {
      Fail("coordinator went away");
    }
  }
  aside::bench::Samples last_subscriber;
  aside::bench::Samples median_subscriber;
  double cpu = 0;
  for (int k = 0; k < o.changes; ++k) {
    aside::v1::DrainBackendsRequest drain;
    drain.set_group(o.group);
    drain.add_addresses(absl::StrCat("10.9.0.", k % 100 + 1, ":8080"));
    drain.set_drained((k / 100) % 2 == 0);
    aside::v1::Group g;
    const double cpu_before =
        o.server_pid > 0 ? aside::bench::ProcessCpuSeconds(o.server_pid) : 0;
    const auto t0 = Clock::now();
    grpc::Status s = admin->DrainBackends(AdminContext(o).get(), drain, &g);
    if (!s.ok()) {
      Fail("drain: " + s.error_message());
    }
    WaitAll(subs, g.generation(), std::chrono::seconds(60),
            absl::StrCat("change ", k));
    if (o.coordinate) {
      PrintLine(absl::StrCat(
          "{\"generation\":", g.generation(), ",\"t0_ns\":", SteadyNanos(t0),
          ",\"last_ns\":", LastArrival(subs, g.generation()), "}"));
      if (!ReadLine(&line)) {
        Fail("coordinator went away");
      }
    }
    if (o.server_pid > 0) {
      cpu += aside::bench::ProcessCpuSeconds(o.server_pid) - cpu_before;
    }
    aside::bench::Samples arrivals;
    int64_t worst = 0;
    for (auto& sub : subs) {
      const int64_t nanos =
          std::chrono::duration_cast<std::chrono::nanoseconds>(
              sub->ArrivalOf(g.generation()) - t0)
              .count();
      arrivals.Add(nanos);
      worst = std::max(worst, nanos);
    }
    last_subscriber.Add(worst);
    median_subscriber.Add(
        static_cast<int64_t>(arrivals.PercentileMicros(50) * 1000));
  }
  for (auto& sub : subs) {
    sub->Cancel();
  }
  const double cpu_per_stream_update_us =
      cpu * 1e6 / (static_cast<double>(o.subscribers) * o.changes);
  std::printf(
      "{\"subscribers\":%d,\"changes\":%d,\"last_p50_ms\":%.3f,"
      "\"last_p99_ms\":%.3f,\"last_max_ms\":%.3f,\"median_p50_ms\":%.3f,"
      "\"server_cpu_s\":%.4f,\"cpu_per_update_us\":%.2f,"
      "\"cpu_per_stream_update_us\":%.3f,\"update_bytes\":%zu}\n",
      o.subscribers, o.changes, last_subscriber.PercentileMicros(50) / 1000,
      last_subscriber.PercentileMicros(99) / 1000,
      last_subscriber.MaxMicros() / 1000,
      median_subscriber.PercentileMicros(50) / 1000, cpu, cpu * 1e6 / o.changes,
      cpu_per_stream_update_us, subs.front()->bytes());
  // Let the cancellations finish before the stubs go away.
  for (auto& sub : subs) {
    for (int i = 0; i < 1000 && !sub->done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return 0;
}
