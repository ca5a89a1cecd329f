// The arena's backends (`arena --role=backend`): one process serves a range
// of the scenario's backends, each a gRPC server on a port of its own.
//
// A backend has `slots` service slots and a FIFO queue: a call waits for a
// slot, then holds it for the scenario's service time over the backend's
// current capacity (service / capacity × the event factor: an antagonist's
// capacity drop, a warm-up ramp); during a stall no call starts. Service
// times are timers, not CPU: one timer thread per process ends every call.
// Events follow the step that the coordinator publishes in shared memory
// (ArenaShm::step_zero_ns, the zero of the scenario's event times).
//
// Every backend publishes its exact number of calls (queued + in service)
// in shared memory, for the perfect-information dispatcher, and its largest
// one per step. It answers every workload call with its index, and sends
// its load with every answer as an ORCA report (gRFC A51) in the trailer
// `endpoint-load-metrics-bin`, mirrored as `orca-load-report-bin` because
// gRPC C++'s core keeps the first for itself: named metrics `rif` (calls
// in the backend after this one left) and `latency` (this call's time in
// the backend, queue and service, in seconds), and `cpu_utilization`
// (busy slots plus queue, over the slots). It serves ORCA's out-of-band
// service (StreamCoreMetrics) as the lab backend did: utilisation over the
// interval and completed calls per second, so that its A58 weight is its
// capacity. grpc.health.v1.Health/Check answers SERVING.
//
// A sinkhole fails every call at once (UNAVAILABLE, "sinkhole N"), reports
// no load (rif 0, latency 0, utilisation 0, no qps) and passes health
// checks.
//
// Every call is counted by kind in shared memory (workload, health check,
// ORCA report, anything else), so that the coordinator counts the messages
// a policy costs the backends.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/arena/arena.h"
#include "bench/arena/arena_shm.h"
#include "bench/scenario/scenario.h"
#include "lib/sync.h"
#include "xds/data/orca/v3/orca_load_report.pb.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

namespace aside::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

Clock::time_point ToClock(int64_t mono_nanos) {
  // steady_clock is CLOCK_MONOTONIC on Linux.
  return Clock::time_point(std::chrono::nanoseconds(mono_nanos));
}

class Call;
class Backend;

// The process's one timer: ends each call's service time at its due time.
// Every backend of the process shares its mutex.
class Timer {
 public:
  Timer() {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Timer() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  Mutex* mu() ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  void AddLocked(int64_t due_ns, Backend* backend, Call* call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    due_.push({due_ns, backend, call});
  }

 private:
  struct Due {
    int64_t at;
    Backend* backend;
    Call* call;
    bool operator>(const Due& other) const { return at > other.at; }
  };
  void Loop();

  Mutex mu_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One call: reads the request, then answers a health check at once, fails
// at once on a sinkhole, or waits for its backend to serve it. Deletes
// itself when gRPC is done with it.
class Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(grpc::GenericCallbackServerContext* context, Backend* backend)
      : context_(context), backend_(backend) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

  // Ends the call with `status`, the text `body` when OK, and the load
  // report `report` in the trailers.
  void Reply(const grpc::Status& status, const std::string& body,
             const std::string& report) {
    if (!report.empty()) {
      context_->AddTrailingMetadata("endpoint-load-metrics-bin", report);
      context_->AddTrailingMetadata("orca-load-report-bin", report);
    }
    if (!status.ok()) {
      Finish(status);
      return;
    }
    grpc::Slice slice(body);
    response_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
  }

  int64_t arrived_ns = 0;
  // The client gave up (its deadline passed or it cancelled); guarded by the
  // timer's mutex.
  bool cancelled = false;

 private:
  grpc::GenericCallbackServerContext* const context_;
  Backend* const backend_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

class Backend {
 public:
  Backend(int index, const Scenario* scenario, ArenaShm* shm, Timer* timer)
      : index_(index),
        spec_(scenario->backends[static_cast<size_t>(index)]),
        scenario_(scenario),
        slot_(&shm->backends[index]),
        shm_(shm),
        timer_(timer),
        name_(absl::StrCat(index)) {}

  int index() const { return index_; }
  bool sinkhole() const { return spec_.sinkhole; }
  ArenaBackendSlot* slot() const { return slot_; }

  // A workload call arrived: starts its service now or queues it.
  void Submit(Call* call) {
    slot_->queries.fetch_add(1, std::memory_order_relaxed);
    if (spec_.sinkhole) {
      call->Reply(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               absl::StrCat("sinkhole ", index_)),
                  "", Report(0, 0, 0));
      return;
    }
    {
      MutexLock lock(timer_->mu());
      call->arrived_ns = NowNanos();
      if (!call->cancelled) {
        if (busy_ < static_cast<int>(spec_.slots)) {
          AccountLocked(call->arrived_ns);
          ++busy_;
          StartLocked(call, call->arrived_ns);
        } else {
          waiting_.push_back(call);
        }
        PublishLocked();
        return;
      }
    }
    // Abandoned before it was queued (Cancel did not find it): it ends here.
    slot_->abandoned.fetch_add(1, std::memory_order_relaxed);
    call->Reply(grpc::Status::CANCELLED, "", "");
  }

  // `call`'s client gave up. A call still waiting leaves the queue and is
  // ended here: a server drops work nobody waits for when it reaches it, as
  // the simulator's backends do, so it neither takes a slot nor counts in
  // the requests in flight a report gives. A call in service runs to its
  // end.
  void Cancel(Call* call) {
    {
      MutexLock lock(timer_->mu());
      call->cancelled = true;
      const auto it = std::find(waiting_.begin(), waiting_.end(), call);
      if (it == waiting_.end()) {
        return;  // in service, answered, or not yet submitted
      }
      waiting_.erase(it);
      PublishLocked();
    }
    slot_->abandoned.fetch_add(1, std::memory_order_relaxed);
    call->Reply(grpc::Status::CANCELLED, "", "");
  }

  // The timer holds its mutex, which is this backend's too.
  void AssertTimerHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(timer_->mu()) {
    timer_->mu()->AssertHeld();
  }

  // The timer: a call's service ended at `now`. Returns the reply's load
  // report; the slot passes to the oldest waiting call.
  std::string CompleteLocked(int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    ++completed_;
    if (!waiting_.empty()) {
      Call* next = waiting_.front();
      waiting_.pop_front();
      StartLocked(next, now);
    } else {
      AccountLocked(now);
      --busy_;
    }
    PublishLocked();
    const int rif = busy_ + static_cast<int>(waiting_.size());
    return Report(rif, ExpectedLatencyLocked(rif), Utilization());
  }

  const std::string& name() const { return name_; }

  // Utilisation and completed calls per second since the last call (the
  // out-of-band ORCA stream).
  struct Load {
    double utilization = 0;
    double qps = 0;
  };
  Load TakeLoad() {
    MutexLock lock(timer_->mu());
    const int64_t now = NowNanos();
    AccountLocked(now);
    const double seconds = static_cast<double>(now - load_since_) / 1e9;
    Load load;
    if (seconds > 0 && !spec_.sinkhole) {
      load.utilization = busy_seconds_ / (seconds * spec_.slots) +
                         static_cast<double>(waiting_.size()) / spec_.slots;
      load.qps = static_cast<double>(completed_) / seconds;
    }
    load_since_ = now;
    busy_seconds_ = 0;
    completed_ = 0;
    return load;
  }

 private:
  // The factor of the backend's own capacity for a call starting at `now`
  // and when it may start (later than `now` during a stall).
  void ScheduleOf(int64_t now, int64_t* start, double* factor) const {
    *start = now;
    *factor = 1;
    const int64_t zero = shm_->step_zero_ns.load(std::memory_order_acquire);
    if (zero == 0) {
      return;
    }
    for (const ScenarioEvent& e : scenario_->events) {
      if (e.kind != ScenarioEvent::Kind::kStall ||
          e.backend != static_cast<uint32_t>(index_)) {
        continue;
      }
      const int64_t from = zero + absl::ToInt64Nanoseconds(e.at);
      const int64_t to = zero + absl::ToInt64Nanoseconds(e.end());
      if (*start >= from && *start < to) {
        *start = to;
      }
    }
    *factor = scenario_->CapacityFactor(static_cast<uint32_t>(index_),
                                        absl::Nanoseconds(*start - zero));
    if (!(*factor > 0)) {  // a stall the loop above did not place
      *factor = 1;
    }
  }

  void StartLocked(Call* call, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    int64_t start = 0;
    double factor = 1;
    ScheduleOf(now, &start, &factor);
    const double call_ns =
        static_cast<double>(absl::ToInt64Nanoseconds(spec_.call_time())) /
        factor;
    service_ewma_ns_ = service_ewma_ns_ == 0
                           ? call_ns
                           : 0.8 * service_ewma_ns_ + 0.2 * call_ns;
    timer_->AddLocked(start + static_cast<int64_t>(call_ns), this, call);
  }

  void AccountLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    busy_seconds_ += busy_ * static_cast<double>(now - busy_since_) / 1e9;
    busy_since_ = now;
  }

  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    const int32_t rif = busy_ + static_cast<int32_t>(waiting_.size());
    slot_->rif.store(rif, std::memory_order_release);
    const int32_t step = shm_->step.load(std::memory_order_acquire);
    if (step >= 0 && step < kArenaMaxSteps &&
        rif > slot_->max_rif[step].load(std::memory_order_relaxed)) {
      slot_->max_rif[step].store(rif, std::memory_order_relaxed);
    }
  }

  // What a call arriving now would take, in seconds, as the backend
  // estimates it from its recent service times and its `rif` requests in
  // flight (Prequal's servers estimate it from recent latencies at the
  // current RIF; bench/sim reports the same).
  double ExpectedLatencyLocked(int rif) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    const double service =
        service_ewma_ns_ > 0
            ? service_ewma_ns_
            : static_cast<double>(absl::ToInt64Nanoseconds(spec_.call_time()));
    return service * std::max(1.0, (rif + 1.0) / spec_.slots) / 1e9;
  }

  double Utilization() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(timer_->mu()) {
    return static_cast<double>(busy_ + static_cast<int>(waiting_.size())) /
           spec_.slots;
  }

  static std::string Report(int rif, double latency_s, double utilization) {
    xds::data::orca::v3::OrcaLoadReport report;
    report.set_cpu_utilization(std::min(utilization, 10.0));
    (*report.mutable_named_metrics())["rif"] = rif;
    // The names prequal reads (docs/operations.md, "prequal").
    (*report.mutable_named_metrics())["latency_ms"] = latency_s * 1e3;
    return report.SerializeAsString();
  }

  const int index_;
  const ScenarioBackend spec_;
  const Scenario* const scenario_;
  ArenaBackendSlot* const slot_;
  ArenaShm* const shm_;
  Timer* const timer_;
  const std::string name_;
  int busy_ ABSL_GUARDED_BY(timer_->mu()) = 0;
  std::deque<Call*> waiting_ ABSL_GUARDED_BY(timer_->mu());
  int64_t busy_since_ ABSL_GUARDED_BY(timer_->mu()) = NowNanos();
  int64_t load_since_ ABSL_GUARDED_BY(timer_->mu()) = NowNanos();
  double busy_seconds_ ABSL_GUARDED_BY(timer_->mu()) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(timer_->mu()) = 0;
  // EWMA of the service times (without the queue) of the calls started.
  double service_ewma_ns_ ABSL_GUARDED_BY(timer_->mu()) = 0;
};

void Call::OnCancel() { backend_->Cancel(this); }

void Call::OnReadDone(bool ok) {
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
    return;
  }
  const std::string& method = context_->method();
  if (method == kArenaMethod) {
    backend_->Submit(this);
    return;
  }
  if (method == kArenaDispatchedMethod) {
    backend_->slot()->dispatched.fetch_sub(1, std::memory_order_acq_rel);
    backend_->Submit(this);
    return;
  }
  if (method == kHealthCheck) {
    backend_->slot()->health_checks.fetch_add(1, std::memory_order_relaxed);
    // grpc.health.v1.HealthCheckResponse{status: SERVING}.
    Reply(grpc::Status::OK, std::string("\x08\x01", 2), "");
    return;
  }
  backend_->slot()->other_calls.fetch_add(1, std::memory_order_relaxed);
  Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, method));
}

void Timer::Loop() {
  // Wake-ups within a few microseconds of the due time.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  struct Reply {
    Call* call;
    std::string body;
    std::string report;
  };
  std::vector<Reply> replies;
  mu_.Lock();
  while (!stopping_) {
    if (due_.empty()) {
      mu_.Await([this] {
        mu_.AssertHeld();
        return stopping_ || !due_.empty();
      });
      continue;
    }
    const int64_t at = due_.top().at;
    const int64_t now = NowNanos();
    if (at > now) {
      mu_.AwaitUntil(
          [this, at] {
            mu_.AssertHeld();
            return stopping_ || due_.top().at < at;
          },
          ToClock(at));
      continue;
    }
    while (!due_.empty() && due_.top().at <= now) {
      const Due d = due_.top();
      due_.pop();
      d.backend->AssertTimerHeld();
      replies.push_back(
          {d.call, d.backend->name(), d.backend->CompleteLocked(now)});
    }
    mu_.Unlock();
    for (const Reply& r : replies) {
      r.call->Reply(grpc::Status::OK, r.body, r.report);
    }
    replies.clear();
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
// interval until the call ends.
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
        continue;
      }
      const Backend::Load load = backend_->TakeLoad();
      report_.set_cpu_utilization(std::min(load.utilization, 10.0));
      report_.set_rps_fractional(load.qps);
      writing_ = true;
      backend_->slot()->orca_reports.fetch_add(1, std::memory_order_relaxed);
      mu_.Unlock();
      StartWrite(&report_);
      mu_.Lock();
    }
    mu_.Await([this] {
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

}  // namespace

int RunBackends(const BackendRole& role) {
  absl::StatusOr<Scenario> scenario =
      LoadArenaScenario(role.scenario, role.scale);
  if (!scenario.ok()) {
    std::fprintf(stderr, "arena backend: %s\n",
                 std::string(scenario.status().message()).c_str());
    return 2;
  }
  ArenaShm* shm = MapArenaShm(role.shm, /*create=*/false);
  if (shm == nullptr) {
    std::fprintf(stderr, "arena backend: cannot map %s\n", role.shm.c_str());
    return 1;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Timer timer;
  struct Served {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Service> service;
    std::unique_ptr<OrcaService> orca;
    std::unique_ptr<grpc::Server> server;
  };
  std::vector<Served> served;
  for (int i = role.first; i < role.first + role.count; ++i) {
    if (i < 0 || static_cast<size_t>(i) >= scenario->backends.size() ||
        i >= kArenaMaxBackends) {
      std::fprintf(stderr, "arena backend: no backend %d\n", i);
      return 2;
    }
    Served s;
    s.backend = std::make_unique<Backend>(i, &*scenario, shm, &timer);
    s.service = std::make_unique<Service>(s.backend.get());
    s.orca = std::make_unique<OrcaService>(s.backend.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(s.orca.get());
    builder.RegisterCallbackGenericService(s.service.get());
    s.server = builder.BuildAndStart();
    if (s.server == nullptr || port == 0) {
      std::fprintf(stderr, "arena backend: cannot listen\n");
      return 1;
    }
    std::fprintf(stderr, "event=arena_backend.listening index=%d port=%d\n", i,
                 port);
    std::fflush(stderr);
    served.push_back(std::move(s));
  }
  // Until SIGTERM, and never longer than the coordinator's bound.
  const timespec bound{static_cast<time_t>(role.max_run_s), 0};
  sigtimedwait(&signals, nullptr, &bound);
  for (Served& s : served) {
    s.server->Shutdown(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(200));
  }
  for (Served& s : served) {
    s.server->Wait();
  }
  return 0;
}

}  // namespace aside::bench
