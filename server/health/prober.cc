#include "server/health/prober.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/health/discard_body.h"
#include "server/health/probe_scheduler.h"
#include "server/health/probe_verdict.h"

namespace aside::server::health_internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using grpc::health::v1::HealthCheckResponse;

// The state of one socket probe (tcp or http).
struct SocketOp {
  explicit SocketOp(asio::io_context& io)
      : socket(io), buffer(kHttpHeaderLimit + 4096) {}
  tcp::socket socket;
  beast::flat_buffer buffer;
  std::unique_ptr<http::response_parser<DiscardBody>> parser;  // http only
  bool timed_out = false;
  const char* phase = "connecting";
};

struct GrpcCall;

// The glue's view of a target: what its probes need (sockets, the gRPC
// channel). When it is probed is the scheduler's business. Only the prober
// thread touches it.
struct ProbeState {
  bool removed = false;
  bool in_flight = false;
  // Not in the schedule: another replica owns the target (fleet
  // ownership). Set only while no probe is in flight; a target that stops
  // being owned during a probe leaves the schedule when it ends
  // (park_pending).
  bool parked = false;
  bool park_pending = false;
  HealthCheckSpec::Kind kind = HealthCheckSpec::Kind::kTcp;
  uint64_t op_seq = 0;  // the probe in flight (or the last one)
  int64_t started = 0;
  std::unique_ptr<SocketOp> op;
  std::shared_ptr<Target> target;
  tcp::endpoint endpoint;
  ProbeScheduler::Timing timing;

  // Cold.
  std::string http_request;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub;
  GrpcCall* grpc_call = nullptr;
};

// One gRPC health call in flight. Created and destroyed on the prober
// thread; gRPC writes `response` before it runs the completion callback.
struct GrpcCall {
  std::shared_ptr<ProbeState> state;
  uint64_t seq = 0;
  std::shared_ptr<grpc::Channel> channel;  // outlives the call
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  HealthCheckResponse response;
};

}  // namespace

class Prober::Impl {
 public:
  Impl(uint32_t max_in_flight, uint64_t seed, const BackendRelay* relay,
       ResultSink sink)
      : relay_(relay),
        sink_(std::move(sink)),
        scheduler_(max_in_flight, seed),
        timer_(io_),
        work_(asio::make_work_guard(io_)) {}

  ~Impl() { Shutdown(); }

  absl::Status Start() {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error& e) {
      return absl::InternalError(
          absl::StrCat("health prober: cannot start its thread: ", e.what()));
    }
    aside::MutexLock lock(&thread_mu_);
    has_cpu_clock_ =
        pthread_getcpuclockid(thread_.native_handle(), &cpu_clock_) == 0;
    return absl::OkStatus();
  }

  void Add(std::shared_ptr<Target> target) {
    asio::post(io_, [this, target = std::move(target)]() mutable {
      AddNow(std::move(target));
    });
  }

  void Remove(uint64_t id) {
    asio::post(io_, [this, id] { RemoveNow(id); });
  }

  void OwnershipChanged(uint64_t id) {
    asio::post(io_, [this, id] {
      auto it = probes_.find(id);
      if (it != probes_.end() && !stopping_) {
        FollowOwnership(*it->second);
      }
    });
  }

  void Post(std::function<void()> fn) { asio::post(io_, std::move(fn)); }

  absl::Duration CpuTime() const {
    aside::MutexLock lock(&thread_mu_);
    if (!has_cpu_clock_) {
      return absl::ZeroDuration();
    }
    timespec ts{};
    if (clock_gettime(cpu_clock_, &ts) != 0) {
      return absl::ZeroDuration();
    }
    return absl::DurationFromTimespec(ts);
  }

  void Shutdown() {
    {
      aside::MutexLock lock(&thread_mu_);
      if (shut_down_) {
        return;
      }
      shut_down_ = true;
    }
    if (thread_.joinable()) {
      asio::post(io_, [this] { StopNow(); });
      // Once StopNow has run no gRPC call can start; the ones in flight were
      // cancelled and complete promptly. Their callbacks post to io_ and
      // touch this object, so both must be over before run() may return.
      aside::MutexLock lock(&grpc_mu_);
      grpc_mu_.Await([this] {
        grpc_mu_.AssertHeld();
        return stopped_ && grpc_outstanding_ == 0;
      });
    }
    // With the work guard gone, run() returns once the aborted handlers
    // have run.
    work_.reset();
    if (thread_.joinable()) {
      thread_.join();
    }
    aside::MutexLock lock(&thread_mu_);
    has_cpu_clock_ = false;
  }

 private:
  void Run() {
    NameThisThread("aside-prober");
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        // Handlers do not throw by design; survive an unexpected one (e.g.
        // bad_alloc) rather than stop probing every target.
        std::fprintf(stderr, "health prober: handler threw: %s\n", e.what());
      }
    }
  }

  // ---- Targets (prober thread) ----

  void AddNow(std::shared_ptr<Target> target) {
    if (stopping_) {
      return;
    }
    auto state = std::make_shared<ProbeState>();
    error_code ec;
    const asio::ip::address ip = asio::ip::make_address(target->host, ec);
    state->endpoint = tcp::endpoint(ip, target->port);
    state->kind = target->spec.kind;
    if (target->spec.kind == HealthCheckSpec::Kind::kHttp) {
      state->http_request = HttpProbeRequest(target->spec, target->host,
                                             target->port, target->ipv6);
    }
    ProbeScheduler::Timing timing;
    timing.interval = absl::ToInt64Nanoseconds(target->spec.interval);
    timing.timeout = absl::ToInt64Nanoseconds(target->spec.timeout);
    timing.jitter = target->spec.jitter;
    // gRPC calls end at their own deadline.
    timing.track_timeout = target->spec.kind != HealthCheckSpec::Kind::kGrpc;
    state->timing = timing;
    state->target = std::move(target);
    const uint64_t id = state->target->id;
    probes_[id] = state;
    if (!state->target->owned.load(std::memory_order_acquire)) {
      state->parked = true;  // another replica probes it
      return;
    }
    actions_.clear();
    scheduler_.Add(id, timing, MonotonicNanos(), actions_);
    Carry();
  }

  // Puts the target in the schedule (due at once) or takes it out, as its
  // owned flag says. A probe in flight keeps its slot until it ends:
  // re-adding the id while the scheduler still holds its slot would leave
  // two probes of one target.
  void FollowOwnership(ProbeState& state) {
    if (state.removed) {
      return;
    }
    const uint64_t id = state.target->id;
    if (!state.target->owned.load(std::memory_order_acquire)) {
      if (state.parked) {
        return;
      }
      if (state.in_flight) {
        state.park_pending = true;
        return;
      }
      scheduler_.Remove(id);
      state.parked = true;
      return;
    }
    state.park_pending = false;
    if (state.parked) {
      state.parked = false;
      actions_.clear();
      scheduler_.Add(id, state.timing, MonotonicNanos(), actions_);
      Carry();
    }
  }

  void RemoveNow(uint64_t id) {
    auto it = probes_.find(id);
    if (it == probes_.end()) {
      return;
    }
    std::shared_ptr<ProbeState> state = std::move(it->second);
    probes_.erase(it);
    scheduler_.Remove(id);
    Abort(*state);
  }

  // Marks the target removed and ends its probe in flight; the handlers
  // finish on this thread and drop the result.
  void Abort(ProbeState& state) {
    state.removed = true;
    if (state.op != nullptr) {
      error_code ignored;
      state.op->socket.close(ignored);
    }
    if (state.grpc_call != nullptr) {
      state.grpc_call->context.TryCancel();
    }
    // An in-flight call holds its own reference to the channel.
    state.stub.reset();
    state.channel.reset();
  }

  void StopNow() {
    stopping_ = true;
    for (auto& [id, state] : probes_) {
      Abort(*state);
    }
    probes_.clear();
    scheduler_.Clear();
    timer_.cancel();
    aside::MutexLock lock(&grpc_mu_);
    stopped_ = true;  // the waiter in Shutdown wakes as the lock is released
  }

  // ---- Carrying out the scheduler's decisions (prober thread) ----

  // Starts the probes and ends the timed-out ones in actions_, then arms
  // the timer for the scheduler's next wake-up if that is earlier than the
  // one armed. Probes started here may end synchronously only through a
  // posted handler (FailSoon), so actions_ is not reentered.
  void Carry() {
    if (!stopping_) {
      for (uint64_t id : actions_.start) {
        auto it = probes_.find(id);
        if (it != probes_.end()) {
          StartProbe(it->second);
        }
      }
      for (uint64_t id : actions_.timed_out) {
        auto it = probes_.find(id);
        if (it != probes_.end()) {
          OnTimeout(*it->second);
        }
      }
    }
    actions_.clear();
    const int64_t next = scheduler_.NextWake();
    if (next < armed_due_ && !stopping_) {
      Arm(next);
    }
  }

  void Arm(int64_t due) {
    armed_due_ = due;
    timer_.expires_at(
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due)));
    timer_.async_wait([this, generation = ++arm_generation_](error_code ec) {
      if (!ec && generation == arm_generation_) {
        OnTimer();
      }
    });
  }

  void OnTimer() {
    armed_due_ = ProbeScheduler::kNever;
    actions_.clear();
    scheduler_.Poll(MonotonicNanos(), actions_);
    Carry();
  }

  // ---- Probes (prober thread) ----

  void StartProbe(const std::shared_ptr<ProbeState>& state) {
    state->in_flight = true;
    state->started = MonotonicNanos();
    const uint64_t seq = ++state->op_seq;
    if (!state->target->owned.load(std::memory_order_acquire)) {
      // Another replica probes it (fleet ownership; the flag changed before
      // OwnershipChanged reached this thread): send nothing, and take it out
      // of the schedule as the probe ends. Posted, like FailSoon, so that
      // actions_ is not reentered.
      state->park_pending = true;
      asio::post(io_, [this, state, seq] {
        Finish(state, seq, ProbeResult{}, /*report=*/false);
      });
      return;
    }
    if (state->kind == HealthCheckSpec::Kind::kGrpc) {
      StartGrpc(state, seq);
      return;
    }
    StartSocket(state, seq);
  }

  // Ends a probe that could not start; posted so that a burst of failures
  // (e.g. out of file descriptors) cannot recurse through the scheduler.
  void FailSoon(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                std::string reason) {
    asio::post(io_, [this, state, seq, reason = std::move(reason)]() mutable {
      Finish(state, seq, ProbeFailure(std::move(reason)));
    });
  }

  void StartSocket(const std::shared_ptr<ProbeState>& state, uint64_t seq) {
    const bool tcp_only = state->kind == HealthCheckSpec::Kind::kTcp;
    auto op = std::make_unique<SocketOp>(io_);
    error_code ec;
    op->socket.open(state->endpoint.protocol(), ec);
    if (ec) {
      FailSoon(
          state, seq,
          SocketFailureVerdict(ec, "socket", false, "", absl::ZeroDuration())
              .reason);
      return;
    }
    if (tcp_only) {
      // Close with RST: no TIME_WAIT per probe on the prober's host.
      op->socket.set_option(asio::socket_base::linger(true, 0), ec);
    }
    state->op = std::move(op);
    state->op->socket.async_connect(
        state->endpoint, [this, state, seq, tcp_only](error_code ec) {
          if (tcp_only) {
            Finish(state, seq,
                   ec ? SocketFailure(*state, ec, "connect") : ProbeSuccess());
          } else {
            OnHttpConnected(state, seq, ec);
          }
        });
  }

  static ProbeResult SocketFailure(const ProbeState& state,
                                   const error_code& ec,
                                   absl::string_view what) {
    const bool timed_out = state.op != nullptr && state.op->timed_out;
    return SocketFailureVerdict(ec, what, timed_out,
                                timed_out ? state.op->phase : "",
                                state.target->spec.timeout);
  }

  void OnHttpConnected(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                       error_code ec) {
    if (ec || state->removed) {
      Finish(state, seq, SocketFailure(*state, ec, "connect"));
      return;
    }
    state->op->phase = "sending the request";
    asio::async_write(state->op->socket, asio::buffer(state->http_request),
                      [this, state, seq](error_code ec, std::size_t) {
                        OnHttpWritten(state, seq, ec);
                      });
  }

  void OnHttpWritten(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                     error_code ec) {
    if (ec || state->removed) {
      Finish(state, seq, SocketFailure(*state, ec, "write"));
      return;
    }
    SocketOp& op = *state->op;
    op.phase = "waiting for the response";
    op.parser = std::make_unique<http::response_parser<DiscardBody>>();
    op.parser->header_limit(kHttpHeaderLimit);
    op.parser->body_limit(state->target->spec.http_body_limit);
    http::async_read(op.socket, op.buffer, *op.parser,
                     [this, state, seq](error_code ec, std::size_t) {
                       OnHttpRead(state, seq, ec);
                     });
  }

  void OnHttpRead(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                  error_code ec) {
    SocketOp& op = *state->op;
    if (op.timed_out) {
      Finish(state, seq, SocketFailure(*state, ec, "read"));
      return;
    }
    if (ec) {
      Finish(state, seq,
             HttpReadErrorVerdict(ec, state->target->spec.http_body_limit));
      return;
    }
    Finish(state, seq,
           HttpStatusVerdict(op.parser->get().result_int(),
                             state->target->spec.http_expected_statuses));
  }

  void OnTimeout(ProbeState& state) {
    if (state.op == nullptr) {
      return;
    }
    state.op->timed_out = true;
    error_code ignored;
    state.op->socket.close(ignored);
  }

  void StartGrpc(const std::shared_ptr<ProbeState>& state, uint64_t seq) {
    const Target& target = *state->target;
    const HealthCheckSpec& spec = target.spec;
    if (state->stub == nullptr) {
      grpc::ChannelArguments args;
      // Reconnect within about one interval after a failure, so a backend
      // that comes back is seen by the next probes, not after gRPC's
      // default backoff of up to two minutes.
      const int interval_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(spec.interval), 1, 3'600'000));
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                  std::min(interval_ms, 1000));
      // (Despite its name, the minimum time a connection attempt may take.)
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                  static_cast<int>(std::clamp<int64_t>(
                      absl::ToInt64Milliseconds(spec.timeout), 1000, 20000)));
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, interval_ms);
      // One connection per target, no retries, no proxies, no service
      // config from DNS, and a small response limit against hostile
      // backends.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
      args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
      args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
      args.SetMaxReceiveMessageSize(kGrpcMaxResponseBytes);
      std::string uri;
      if (relay_ != nullptr) {
        uri = relay_->Route(
            target.ipv6 ? absl::StrCat("[", target.host, "]:", target.port)
                        : absl::StrCat(target.host, ":", target.port),
            "health", kGrpcMaxResponseBytes, &args, spec.grpc_authority);
      } else {
        if (!spec.grpc_authority.empty()) {
          args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, spec.grpc_authority);
        }
        uri = target.ipv6
                  ? absl::StrCat("ipv6:[", target.host, "]:", target.port)
                  : absl::StrCat("ipv4:", target.host, ":", target.port);
      }
      state->channel = grpc::CreateCustomChannel(
          uri, grpc::InsecureChannelCredentials(), args);
      state->stub = grpc::health::v1::Health::NewStub(state->channel);
    }
    auto* call = new GrpcCall;
    call->state = state;
    call->seq = seq;
    call->channel = state->channel;
    call->request.set_service(spec.grpc_service);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(spec.timeout));
    state->grpc_call = call;
    {
      aside::MutexLock lock(&grpc_mu_);
      ++grpc_outstanding_;
    }
    const absl::Duration timeout = spec.timeout;
    state->stub->async()->Check(
        &call->context, &call->request, &call->response,
        [this, call, timeout](grpc::Status status) {
          // On a gRPC thread. Hand the call back to the prober thread, which
          // owns it, and touch nothing of it afterwards.
          ProbeResult result = GrpcVerdict(status, call->response, timeout);
          asio::post(io_, [this, owned = std::unique_ptr<GrpcCall>(call),
                           result = std::move(result)]() mutable {
            OnGrpcDone(std::move(owned), std::move(result));
          });
          aside::MutexLock lock(&grpc_mu_);
          --grpc_outstanding_;  // Shutdown's waiter re-checks on release
        });
  }

  void OnGrpcDone(std::unique_ptr<GrpcCall> call, ProbeResult result) {
    std::shared_ptr<ProbeState> state = std::move(call->state);
    if (state->grpc_call == call.get()) {
      state->grpc_call = nullptr;
    }
    Finish(state, call->seq, std::move(result));
  }

  // Ends the probe `seq` of `state` exactly once: reports the result
  // (unless the target is gone or the probe was skipped), then tells the
  // scheduler, which frees the slot, schedules the next probe and may start
  // queued ones.
  void Finish(const std::shared_ptr<ProbeState>& state, uint64_t seq,
              ProbeResult result, bool report = true) {
    if (!state->in_flight || seq != state->op_seq) {
      return;
    }
    state->in_flight = false;
    if (state->op != nullptr) {
      // Closed explicitly: Asio's destructor would turn SO_LINGER 0 off
      // again and leave a TIME_WAIT socket behind every tcp probe.
      error_code ignored;
      state->op->socket.close(ignored);
      state->op.reset();
    }
    if (stopping_) {
      return;
    }
    const int64_t now = MonotonicNanos();
    if (!state->removed && report) {
      result.latency = absl::Nanoseconds(now - state->started);
      sink_(*state->target, std::move(result));
    }
    actions_.clear();
    scheduler_.Finished(state->target->id, now, actions_);
    Carry();
    if (state->park_pending) {
      state->park_pending = false;
      FollowOwnership(*state);
    }
  }

  const BackendRelay* const relay_;
  const ResultSink sink_;
  // When each target is probed; prober thread only.
  ProbeScheduler scheduler_;
  ProbeScheduler::Actions actions_;  // reused by every scheduler call

  // Declared before everything that owns sockets or timers so that it is
  // destroyed after them (the thread is joined in ~Impl first).
  asio::io_context io_;
  asio::steady_timer timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;

  // Prober thread only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<ProbeState>> probes_;
  int64_t armed_due_ = ProbeScheduler::kNever;
  uint64_t arm_generation_ = 0;
  bool stopping_ = false;

  // gRPC calls whose completion callback has not finished yet, and whether
  // StopNow has run (after which none start).
  aside::Mutex grpc_mu_;
  uint64_t grpc_outstanding_ ABSL_GUARDED_BY(grpc_mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(grpc_mu_) = false;

  mutable aside::Mutex thread_mu_;
  bool shut_down_ = false;
  bool has_cpu_clock_ = false;
  clockid_t cpu_clock_{};
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<Prober>> Prober::Create(
    uint32_t max_in_flight, uint64_t seed, const BackendRelay* relay,
    ResultSink sink) {
  auto impl =
      std::make_unique<Impl>(max_in_flight, seed, relay, std::move(sink));
  absl::Status started = impl->Start();
  if (!started.ok()) {
    return started;
  }
  return std::unique_ptr<Prober>(new Prober(std::move(impl)));
}

Prober::Prober(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Prober::~Prober() { Shutdown(); }
void Prober::Add(std::shared_ptr<Target> target) {
  impl_->Add(std::move(target));
}
void Prober::Remove(uint64_t target_id) { impl_->Remove(target_id); }
void Prober::OwnershipChanged(uint64_t target_id) {
  impl_->OwnershipChanged(target_id);
}
void Prober::Post(std::function<void()> fn) { impl_->Post(std::move(fn)); }
void Prober::Shutdown() { impl_->Shutdown(); }
absl::Duration Prober::CpuTime() const { return impl_->CpuTime(); }

}  // namespace aside::server::health_internal
