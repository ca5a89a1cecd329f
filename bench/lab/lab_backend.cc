// lab_backend: one gRPC backend of the balancing-quality lab, with a
// latency the lab controls. Every unary call to any method (served by a
// generic service, so no proto is needed) is answered with the backend's
// name after the current service time; the wait is a timer, not a busy
// loop, so a slow backend costs no CPU that the load generator on the same
// 2-core machine would miss.
//
// Capacity model: the backend has `--workers` service slots (0: unlimited).
// A call holds a slot for the service time; calls that find every slot
// taken wait in a FIFO queue. A healthy backend with 2 slots at 1 ms serves
// up to 2000 calls/s; the same backend at 10 ms serves 200.
//
// Warm-up: with --cold_latency_us and --warmup_ms, the service time starts
// at the cold latency when the first call arrives and falls linearly to
// --latency_us over the warm-up window (a JIT or cache warming up).
//
// Load reports: the backend serves ORCA's out-of-band service
// (xds.service.orca.v3.OpenRcaService/StreamCoreMetrics, gRFC A51): every
// report interval, its utilisation over the interval (the busy fraction of
// its slots, plus the queue in slots, so a saturated backend reports more
// than 1), and the calls per second it completed. Its A58 weight, qps over
// utilisation, is then its capacity (slots over service time).
//
// Control: a call to /aside.lab.Control/Set with a text payload
// "latency_us=N" or "workers=N" changes the setting for calls that start
// after it; the reply is "ok". grpc.health.v1 is served (SERVING) for the
// Aside server's probes.
//
//   lab_backend --listen 127.0.0.1:0 --name 3 --latency_us 1000 --workers 2
//               [--cold_latency_us 10000 --warmup_ms 3000]
//
// Prints "event=lab_backend.listening name=N port=P" on stderr once serving.
// Threads: gRPC's callback threads accept calls; one timer thread completes
// them. Cost per call: a mutex, a heap push and pop, one reply.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/command_line.h"
#include "lib/sync.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC address");
ABSL_FLAG(std::string, name, "0", "the name replies carry");
ABSL_FLAG(int64_t, latency_us, 1000, "service time");
ABSL_FLAG(int64_t, cold_latency_us, 0, "service time when cold");
ABSL_FLAG(int64_t, warmup_ms, 0, "time from cold to warm");
ABSL_FLAG(int, workers, 2, "requests served at once");

namespace aside::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: lab_backend [--listen HOST:PORT] [--name N] [--latency_us US] "
    "[--workers N] [--cold_latency_us US --warmup_ms MS]\n";

struct Flags {
  std::string listen = "127.0.0.1:0";
  std::string name = "0";
  int64_t latency_us = 1000;
  int64_t cold_latency_us = 0;
  int64_t warmup_ms = 0;
  int workers = 2;
};

class Call;

// The service slots, their queue and the timer thread that ends each call's
// service time. Thread-safe.
class Backend {
 public:
  explicit Backend(const Flags& flags)
      : name_(flags.name),
        latency_ns_(flags.latency_us * 1000),
        cold_latency_ns_(flags.cold_latency_us * 1000),
        warmup_ns_(flags.warmup_ms * 1000000),
        workers_(flags.workers) {
    timer_ = std::thread([this] { TimerLoop(); });
  }
  ~Backend() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    timer_.join();
  }

  const std::string& name() const { return name_; }

  // Utilisation and completed calls per second since the last call (one
  // reader: the one ORCA stream a backend has).
  struct Load {
    double utilization = 0;
    double qps = 0;
  };
  Load TakeLoad() {
    MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    AccountLocked(now);
    const double seconds =
        std::chrono::duration<double>(now - load_since_).count();
    Load load;
    if (seconds > 0) {
      const double slots = std::max(workers_, 1);
      load.utilization = busy_seconds_ / (seconds * slots) +
                         static_cast<double>(waiting_.size()) / slots;
      load.qps = static_cast<double>(completed_) / seconds;
    }
    load_since_ = now;
    busy_seconds_ = 0;
    completed_ = 0;
    return load;
  }

  // A call arrived: starts its service time now or queues it.
  void Submit(Call* call);

  // Applies a control payload; returns false when it is not understood.
  bool Control(absl::string_view payload) {
    MutexLock lock(&mu_);
    int64_t value = 0;
    if (absl::ConsumePrefix(&payload, "latency_us=") &&
        absl::SimpleAtoi(payload, &value) && value >= 0) {
      latency_ns_ = value * 1000;
      cold_latency_ns_ = 0;
      return true;
    }
    if (absl::ConsumePrefix(&payload, "workers=") &&
        absl::SimpleAtoi(payload, &value) && value >= 0) {
      workers_ = static_cast<int>(value);
      return true;
    }
    return false;
  }

 private:
  struct Due {
    Clock::time_point at;
    Call* call;
    bool operator>(const Due& other) const { return at > other.at; }
  };

  // The service time of a call starting now.
  Clock::duration ServiceTimeLocked(Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t ns = latency_ns_;
    if (cold_latency_ns_ > 0 && warmup_ns_ > 0) {
      if (first_call_ == Clock::time_point()) {
        first_call_ = now;
      }
      const double into =
          static_cast<double>((now - first_call_).count()) /
          static_cast<double>(std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::nanoseconds(warmup_ns_))
                                  .count());
      if (into < 1.0) {
        ns = static_cast<int64_t>(static_cast<double>(cold_latency_ns_) +
                                  (static_cast<double>(latency_ns_) -
                                   static_cast<double>(cold_latency_ns_)) *
                                      into);
      }
    }
    return std::chrono::nanoseconds(ns);
  }

  // Adds the slots' busy time since the last change.
  void AccountLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    busy_seconds_ +=
        busy_ * std::chrono::duration<double>(now - busy_since_).count();
    busy_since_ = now;
  }

  void StartLocked(Call* call, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    due_.push({now + ServiceTimeLocked(now), call});
  }

  void TimerLoop();

  const std::string name_;
  Mutex mu_;
  int64_t latency_ns_ ABSL_GUARDED_BY(mu_);
  int64_t cold_latency_ns_ ABSL_GUARDED_BY(mu_);
  int64_t warmup_ns_ ABSL_GUARDED_BY(mu_);
  int workers_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  // Load accounting (TakeLoad).
  Clock::time_point busy_since_ ABSL_GUARDED_BY(mu_) = Clock::now();
  Clock::time_point load_since_ ABSL_GUARDED_BY(mu_) = Clock::now();
  double busy_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point first_call_ ABSL_GUARDED_BY(mu_);
  std::deque<Call*> waiting_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

// One call: reads the request, then either answers a control request at once
// or waits for the Backend to end its service time. Deletes itself when
// gRPC is done with it.
class Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(grpc::GenericCallbackServerContext* context, Backend* backend)
      : backend_(backend),
        control_(context->method() == "/aside.lab.Control/Set") {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
      return;
    }
    if (control_) {
      std::vector<grpc::Slice> slices;
      std::string payload;
      if (request_.Dump(&slices).ok()) {
        for (const grpc::Slice& s : slices) {
          payload.append(reinterpret_cast<const char*>(s.begin()), s.size());
        }
      }
      if (!backend_->Control(payload)) {
        Finish(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("control: cannot apply '", payload, "'")));
        return;
      }
      Reply("ok");
      return;
    }
    backend_->Submit(this);
  }

  // Called by the Backend's timer thread when the service time is over.
  void Reply(const std::string& text) {
    grpc::Slice slice(text);
    response_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  Backend* const backend_;
  const bool control_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

void Backend::Submit(Call* call) {
  MutexLock lock(&mu_);
  if (workers_ > 0 && busy_ >= workers_) {
    waiting_.push_back(call);
    return;
  }
  const Clock::time_point now = Clock::now();
  AccountLocked(now);
  ++busy_;
  StartLocked(call, now);  // the unlock wakes the timer thread
}

void Backend::TimerLoop() {
  // Wake-ups within a few microseconds of the due time, not the default
  // 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  mu_.Lock();
  while (!stopping_) {
    if (due_.empty()) {
      mu_.Await([this] {
        mu_.AssertHeld();
        return stopping_ || !due_.empty();
      });
      continue;
    }
    const Clock::time_point at = due_.top().at;
    const Clock::time_point now = Clock::now();
    if (at > now) {
      // Until `at`, or until a call due earlier is started. A deadline
      // rather than a timeout: the wait starts a little after `now`.
      mu_.AwaitUntil(
          [this, at] {
            mu_.AssertHeld();
            return stopping_ || due_.top().at < at;
          },
          at);
      continue;
    }
    Call* call = due_.top().call;
    due_.pop();
    ++completed_;
    // The slot passes to the oldest waiting call, if any.
    if (!waiting_.empty()) {
      Call* next = waiting_.front();
      waiting_.pop_front();
      StartLocked(next, now);
    } else {
      AccountLocked(now);
      --busy_;
    }
    mu_.Unlock();
    call->Reply(name_);
    mu_.Lock();
  }
  mu_.Unlock();
}

class Service final : public grpc::CallbackGenericService {
 public:
  explicit Service(Backend* backend) : backend_(backend) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new Call(context, backend_);
  }

 private:
  Backend* const backend_;
};

// One StreamCoreMetrics stream: a thread of its own writes a report every
// interval until the call ends, finishes it, and deletes the stream once
// gRPC is done with it (OnDone).
class OrcaStream final
    : public grpc::ServerWriteReactor<xds::data::orca::v3::OrcaLoadReport> {
 public:
  OrcaStream(Backend* backend, Clock::duration interval) : backend_(backend) {
    backend_->TakeLoad();  // the first report covers its own interval
    std::thread([this, interval] { Run(interval); }).detach();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    ended_ = ended_ || !ok;
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    ended_ = true;
  }
  void OnDone() override {
    MutexLock lock(&mu_);
    ended_ = true;
    done_ = true;
  }

 private:
  void Run(Clock::duration interval) {
    mu_.Lock();
    Clock::time_point next = Clock::now() + interval;
    while (true) {
      mu_.AwaitUntil(
          [this] {
            mu_.AssertHeld();
            return ended_;
          },
          next);
      if (ended_) {
        break;
      }
      next += interval;
      if (writing_) {
        continue;  // the last report is still on its way
      }
      const Backend::Load load = backend_->TakeLoad();
      report_.set_cpu_utilization(std::min(load.utilization, 10.0));
      report_.set_rps_fractional(load.qps);
      writing_ = true;
      mu_.Unlock();
      StartWrite(&report_);
      mu_.Lock();
    }
    mu_.Await([this] {  // a write in flight completes, ok or not
      mu_.AssertHeld();
      return !writing_;
    });
    mu_.Unlock();
    Finish(grpc::Status::OK);
    mu_.Lock();
    mu_.Await([this] {
      mu_.AssertHeld();
      return done_;
    });
    mu_.Unlock();
    delete this;
  }

  Backend* const backend_;
  Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  xds::data::orca::v3::OrcaLoadReport report_;
};

class OrcaService final
    : public xds::service::orca::v3::OpenRcaService::CallbackService {
 public:
  explicit OrcaService(Backend* backend) : backend_(backend) {}
  grpc::ServerWriteReactor<xds::data::orca::v3::OrcaLoadReport>*
  StreamCoreMetrics(
      grpc::CallbackServerContext*,
      const xds::service::orca::v3::OrcaLoadReportRequest* request) override {
    const int64_t ms = request->report_interval().seconds() * 1000 +
                       request->report_interval().nanos() / 1000000;
    return new OrcaStream(
        backend_, std::chrono::milliseconds(std::max<int64_t>(ms, 100)));
  }

 private:
  Backend* const backend_;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  if (absl::StatusOr<std::vector<std::string>> args =
          ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::fprintf(stderr, "lab_backend: %s\n",
                 std::string(args.status().message()).c_str());
    return false;
  }
  flags->listen = absl::GetFlag(FLAGS_listen);
  flags->name = absl::GetFlag(FLAGS_name);
  flags->latency_us = absl::GetFlag(FLAGS_latency_us);
  flags->cold_latency_us = absl::GetFlag(FLAGS_cold_latency_us);
  flags->warmup_ms = absl::GetFlag(FLAGS_warmup_ms);
  flags->workers = absl::GetFlag(FLAGS_workers);
  return flags->latency_us >= 0 && flags->workers >= 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Backend backend(flags);
  Service service(&backend);
  OrcaService orca(&backend);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&orca);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "lab_backend: cannot listen on %s\n",
                 flags.listen.c_str());
    return 1;
  }
  std::fprintf(stderr, "event=lab_backend.listening name=%s port=%d\n",
               flags.name.c_str(), port);
  std::fflush(stderr);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(200));
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace aside::bench

int main(int argc, char** argv) { return aside::bench::Main(argc, argv); }
