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
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/clock.h"

namespace aside::server::health_internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using grpc::health::v1::HealthCheckResponse;

// Due times are rounded up to a tick of interval / 100, within 1..10 ms,
// so that targets due together start in one batch: one timer wake-up
// starts them all, and on loopback their connects complete together too
// (one epoll wake-up instead of one per probe). 10 ms is 1 % of the
// default-sized 1 s interval, well inside its 5 % jitter.
constexpr int64_t kMinTickNanos = 1'000'000;
constexpr int64_t kMaxTickNanos = 10'000'000;

int64_t TickFor(const HealthCheckSpec& spec) {
  return std::clamp<int64_t>(absl::ToInt64Nanoseconds(spec.interval) / 100,
                             kMinTickNanos, kMaxTickNanos);
}

// Backend-provided text kept in a reason.
constexpr size_t kMaxReasonDetail = 200;

int64_t RoundUpToTick(int64_t nanos, int64_t tick) {
  return (nanos + tick - 1) / tick * tick;
}

// A body type that counts nothing and stores nothing: the probe needs the
// status, the parser enforces the size limit.
struct DiscardBody {
  struct value_type {};
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type&) {}
    void init(const boost::optional<std::uint64_t>&, error_code& ec) {
      ec = {};
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, error_code& ec) {
      ec = {};
      return asio::buffer_size(buffers);
    }
    void finish(error_code& ec) { ec = {}; }
  };
};

std::string Lower(std::string text) {
  absl::AsciiStrToLower(&text);
  return text;
}

std::string Detail(absl::string_view text) {
  std::string out(text.substr(0, kMaxReasonDetail));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = ' ';
    }
  }
  if (text.size() > kMaxReasonDetail) {
    out += "...";
  }
  return out;
}

absl::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "INVALID_CODE";
  }
}

ProbeResult Success(std::string warning = {}) {
  ProbeResult r;
  r.success = true;
  r.reason = std::move(warning);
  return r;
}

ProbeResult Failure(std::string reason) {
  ProbeResult r;
  r.success = false;
  r.reason = std::move(reason);
  return r;
}

// The verdict of a finished grpc.health.v1 Check call (DESIGN.md §3, the
// gRPC health-checking protocol): only SERVING is healthy; UNIMPLEMENTED
// means the backend has no health service and counts as healthy with a
// warning.
ProbeResult GrpcVerdict(const grpc::Status& status,
                        const HealthCheckResponse& response,
                        absl::Duration timeout) {
  if (status.ok()) {
    const int value = static_cast<int>(response.status());
    switch (value) {
      case HealthCheckResponse::SERVING:
        return Success();
      case HealthCheckResponse::NOT_SERVING:
        return Failure("grpc status NOT_SERVING");
      case HealthCheckResponse::SERVICE_UNKNOWN:
        return Failure("grpc status SERVICE_UNKNOWN");
      case HealthCheckResponse::UNKNOWN:
        return Failure("grpc status UNKNOWN");
      default:
        return Failure(absl::StrCat("grpc status ", value, " (not a known "
                                    "serving status)"));
    }
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNIMPLEMENTED:
      return Success(
          "warning: the backend does not implement grpc.health.v1.Health "
          "(UNIMPLEMENTED); counted as healthy");
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Failure(absl::StrCat("timeout after ",
                                  absl::FormatDuration(timeout),
                                  " (grpc DEADLINE_EXCEEDED)"));
    default:
      return Failure(absl::StrCat("grpc ", GrpcCodeName(status.error_code()),
                                  ": ", Detail(status.error_message())));
  }
}

std::string HttpRequest(const Target& target) {
  std::string host = target.spec.http_host;
  if (host.empty()) {
    host = target.ipv6 ? absl::StrCat("[", target.host, "]:", target.port)
                       : absl::StrCat(target.host, ":", target.port);
  }
  return absl::StrCat("GET ", target.spec.http_path, " HTTP/1.1\r\nHost: ",
                      host,
                      "\r\nUser-Agent: aside-health\r\nAccept: */*\r\n"
                      "Connection: close\r\n\r\n");
}

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
struct TimeoutList;

// The prober's view of a target. Only the prober thread touches it.
//
// With 10 000 targets each probe finds its state cold in the cache, so what
// every probe reads sits together at the front, copied out of the spec.
struct ProbeState {
  // Hot: read or written by every probe.
  bool removed = false;
  bool in_flight = false;
  bool queued = false;
  HealthCheckSpec::Kind kind = HealthCheckSpec::Kind::kTcp;
  uint64_t op_seq = 0;        // the probe in flight (or the last one)
  uint64_t schedule_seq = 0;  // the pending schedule entry
  int64_t started = 0;
  int64_t interval = 0;  // nanoseconds
  int64_t timeout = 0;   // nanoseconds
  int64_t tick = 0;      // TickFor(spec)
  double jitter = 0;
  std::unique_ptr<SocketOp> op;
  std::shared_ptr<Target> target;
  TimeoutList* timeouts = nullptr;  // the list for (timeout, tick)
  ProbeState* timeout_prev = nullptr;
  ProbeState* timeout_next = nullptr;
  bool timeout_linked = false;
  tcp::endpoint endpoint;

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

// A probe due to start. Entries live in a calendar of due ticks; within a
// tick they keep the order they were scheduled in.
struct ScheduleEntry {
  uint64_t seq = 0;  // the schedule_seq it belongs to
  std::shared_ptr<ProbeState> state;
};

// The socket probes in flight with one (timeout, tick), in the order they
// started, which is the order they time out in: an intrusive list, so that
// starting and ending a probe are O(1) and a timer check looks at the
// oldest probe only. A probe in flight stays alive (its handler holds it),
// and it is unlinked before it ends.
struct TimeoutList {
  ProbeState* head = nullptr;
  ProbeState* tail = nullptr;
};

}  // namespace

class Prober::Impl {
 public:
  Impl(uint32_t max_in_flight, uint64_t seed, ResultSink sink)
      : max_in_flight_(std::max<uint32_t>(1, max_in_flight)),
        sink_(std::move(sink)),
        rng_(seed),
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
    std::lock_guard<std::mutex> lock(thread_mu_);
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

  void Post(std::function<void()> fn) { asio::post(io_, std::move(fn)); }

  absl::Duration CpuTime() const {
    std::lock_guard<std::mutex> lock(thread_mu_);
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
      std::lock_guard<std::mutex> lock(thread_mu_);
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
      std::unique_lock<std::mutex> lock(grpc_mu_);
      grpc_idle_.wait(lock,
                      [this] { return stopped_ && grpc_outstanding_ == 0; });
    }
    // With the work guard gone, run() returns once the aborted handlers
    // have run.
    work_.reset();
    if (thread_.joinable()) {
      thread_.join();
    }
    std::lock_guard<std::mutex> lock(thread_mu_);
    has_cpu_clock_ = false;
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "aside-prober");
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
    state->interval = absl::ToInt64Nanoseconds(target->spec.interval);
    state->timeout = absl::ToInt64Nanoseconds(target->spec.timeout);
    state->jitter = target->spec.jitter;
    state->tick = TickFor(target->spec);
    state->timeouts = &timeout_lists_[{state->timeout, state->tick}];
    if (target->spec.kind == HealthCheckSpec::Kind::kHttp) {
      state->http_request = HttpRequest(*target);
    }
    state->target = std::move(target);
    const uint64_t id = state->target->id;
    probes_[id] = state;
    StartOrQueue(state);
  }

  void RemoveNow(uint64_t id) {
    auto it = probes_.find(id);
    if (it == probes_.end()) {
      return;
    }
    std::shared_ptr<ProbeState> state = std::move(it->second);
    probes_.erase(it);
    Abort(*state);
  }

  // Marks the target removed and ends its probe in flight; the handlers
  // finish on this thread and drop the result.
  void Abort(ProbeState& state) {
    state.removed = true;
    UnlinkTimeout(state);
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
    waiting_.clear();
    calendar_.clear();
    for (auto& [key, list] : timeout_lists_) {
      while (list.head != nullptr) {
        UnlinkTimeout(*list.head);
      }
    }
    timer_.cancel();
    std::lock_guard<std::mutex> lock(grpc_mu_);
    stopped_ = true;
    grpc_idle_.notify_all();
  }

  // ---- Scheduling (prober thread) ----

  void StartOrQueue(const std::shared_ptr<ProbeState>& state) {
    if (stopping_ || state->removed || state->in_flight || state->queued) {
      return;
    }
    if (in_flight_ < max_in_flight_ && waiting_.empty()) {
      StartProbe(state);
    } else {
      state->queued = true;
      waiting_.push_back(state);
    }
  }

  void DrainQueue() {
    while (in_flight_ < max_in_flight_ && !waiting_.empty()) {
      std::shared_ptr<ProbeState> state = std::move(waiting_.front());
      waiting_.pop_front();
      state->queued = false;
      if (!state->removed && !stopping_) {
        StartProbe(state);
      }
    }
  }

  void PushSchedule(int64_t due, ScheduleEntry entry) {
    auto [it, inserted] = calendar_.try_emplace(due);
    if (inserted && !spare_buckets_.empty()) {
      it->second.swap(spare_buckets_.back());  // reuse its capacity
      spare_buckets_.pop_back();
    }
    it->second.push_back(std::move(entry));
    if (due < armed_due_) {
      Arm(due);
    }
  }

  void Arm(int64_t due) {
    armed_due_ = due;
    timer_.expires_at(std::chrono::steady_clock::time_point(
        std::chrono::nanoseconds(due)));
    timer_.async_wait([this, generation = ++arm_generation_](error_code ec) {
      if (!ec && generation == arm_generation_) {
        OnTimer();
      }
    });
  }

  static int64_t TimeoutDue(const ProbeState& state) {
    return RoundUpToTick(state.started + state.timeout, state.tick);
  }

  void LinkTimeout(ProbeState& state) {
    TimeoutList& list = *state.timeouts;
    state.timeout_prev = list.tail;
    state.timeout_next = nullptr;
    (list.tail != nullptr ? list.tail->timeout_next : list.head) = &state;
    list.tail = &state;
    state.timeout_linked = true;
    const int64_t due = TimeoutDue(state);
    if (due < armed_due_) {
      Arm(due);
    }
  }

  static void UnlinkTimeout(ProbeState& state) {
    if (!state.timeout_linked) {
      return;
    }
    TimeoutList& list = *state.timeouts;
    (state.timeout_prev != nullptr ? state.timeout_prev->timeout_next
                                   : list.head) = state.timeout_next;
    (state.timeout_next != nullptr ? state.timeout_next->timeout_prev
                                   : list.tail) = state.timeout_prev;
    state.timeout_prev = state.timeout_next = nullptr;
    state.timeout_linked = false;
  }

  void OnTimer() {
    // No re-arming while the due entries run: one Arm at the end.
    armed_due_ = std::numeric_limits<int64_t>::min();
    const int64_t now = MonotonicNanos();
    while (!calendar_.empty() && calendar_.begin()->first <= now) {
      std::vector<ScheduleEntry> bucket = std::move(calendar_.begin()->second);
      calendar_.erase(calendar_.begin());
      for (ScheduleEntry& entry : bucket) {
        if (!entry.state->removed && !stopping_ &&
            entry.seq == entry.state->schedule_seq) {
          StartOrQueue(entry.state);
        }
      }
      bucket.clear();
      if (spare_buckets_.size() < 16) {
        spare_buckets_.push_back(std::move(bucket));
      }
    }
    int64_t next = calendar_.empty() ? std::numeric_limits<int64_t>::max()
                                     : calendar_.begin()->first;
    for (auto& [key, list] : timeout_lists_) {
      while (list.head != nullptr && TimeoutDue(*list.head) <= now) {
        ProbeState& state = *list.head;
        UnlinkTimeout(state);
        OnTimeout(state);
      }
      if (list.head != nullptr) {
        next = std::min(next, TimeoutDue(*list.head));
      }
    }
    armed_due_ = std::numeric_limits<int64_t>::max();
    if (next != std::numeric_limits<int64_t>::max() && !stopping_) {
      Arm(next);
    }
  }

  void ScheduleNext(const std::shared_ptr<ProbeState>& state) {
    double factor = 1.0;
    if (state->jitter > 0) {
      std::uniform_real_distribution<double> jitter(-state->jitter,
                                                    state->jitter);
      factor += jitter(rng_);
    }
    const int64_t interval =
        static_cast<int64_t>(static_cast<double>(state->interval) * factor);
    PushSchedule(
        RoundUpToTick(state->started + std::max<int64_t>(interval, 1),
                      state->tick),
        {++state->schedule_seq, state});
  }

  // ---- Probes (prober thread) ----

  void StartProbe(const std::shared_ptr<ProbeState>& state) {
    state->in_flight = true;
    ++in_flight_;
    state->started = MonotonicNanos();
    const uint64_t seq = ++state->op_seq;
    if (state->kind == HealthCheckSpec::Kind::kGrpc) {
      StartGrpc(state, seq);
      return;
    }
    LinkTimeout(*state);
    StartSocket(state, seq);
  }

  // Ends a probe that could not start; posted so that a burst of failures
  // (e.g. out of file descriptors) cannot recurse through DrainQueue.
  void FailSoon(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                std::string reason) {
    asio::post(io_, [this, state, seq, reason = std::move(reason)]() mutable {
      Finish(state, seq, Failure(std::move(reason)));
    });
  }

  void StartSocket(const std::shared_ptr<ProbeState>& state, uint64_t seq) {
    const bool tcp_only = state->kind == HealthCheckSpec::Kind::kTcp;
    auto op = std::make_unique<SocketOp>(io_);
    error_code ec;
    op->socket.open(state->endpoint.protocol(), ec);
    if (ec) {
      FailSoon(state, seq, absl::StrCat("socket: ", Lower(ec.message())));
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
            Finish(state, seq, ec ? SocketFailure(*state, ec, "connect")
                                  : Success());
          } else {
            OnHttpConnected(state, seq, ec);
          }
        });
  }

  ProbeResult SocketFailure(const ProbeState& state, const error_code& ec,
                            absl::string_view what) {
    if (state.op != nullptr && state.op->timed_out) {
      return Failure(absl::StrCat(
          "timeout after ", absl::FormatDuration(state.target->spec.timeout),
          " (", state.op->phase, ")"));
    }
    return Failure(absl::StrCat(what, ": ", Lower(ec.message())));
  }

  void OnHttpConnected(const std::shared_ptr<ProbeState>& state, uint64_t seq,
                       error_code ec) {
    if (ec || state->removed) {
      Finish(state, seq, SocketFailure(*state, ec, "connect"));
      return;
    }
    state->op->phase = "sending the request";
    asio::async_write(
        state->op->socket, asio::buffer(state->http_request),
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
      std::string reason;
      if (ec == http::error::body_limit) {
        reason = absl::StrCat("http body exceeds ",
                              state->target->spec.http_body_limit, " bytes");
      } else if (ec == http::error::header_limit) {
        reason = absl::StrCat("http response header exceeds ",
                              kHttpHeaderLimit, " bytes");
      } else if (ec == http::error::end_of_stream) {
        reason = "http connection closed before a response";
      } else if (ec == http::error::partial_message) {
        reason = "http response truncated (connection closed)";
      } else if (ec.category() ==
                 http::make_error_code(http::error::bad_status).category()) {
        reason = absl::StrCat("http malformed response: ",
                              Lower(ec.message()));
      } else {
        reason = absl::StrCat("read: ", Lower(ec.message()));
      }
      Finish(state, seq, Failure(std::move(reason)));
      return;
    }
    const unsigned status = op.parser->get().result_int();
    if (status < 100 || status > 599) {
      Finish(state, seq,
             Failure(absl::StrCat("http status ", status, " out of range")));
      return;
    }
    for (const StatusRange& range : state->target->spec.http_expected_statuses) {
      if (status >= range.from && status <= range.to) {
        Finish(state, seq, Success());
        return;
      }
    }
    Finish(state, seq, Failure(absl::StrCat("http status ", status)));
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
      if (!spec.grpc_authority.empty()) {
        args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, spec.grpc_authority);
      }
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
      const std::string uri =
          target.ipv6 ? absl::StrCat("ipv6:[", target.host, "]:", target.port)
                      : absl::StrCat("ipv4:", target.host, ":", target.port);
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
      std::lock_guard<std::mutex> lock(grpc_mu_);
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
          std::lock_guard<std::mutex> lock(grpc_mu_);
          if (--grpc_outstanding_ == 0) {
            grpc_idle_.notify_all();
          }
        });
  }

  void OnGrpcDone(std::unique_ptr<GrpcCall> call, ProbeResult result) {
    std::shared_ptr<ProbeState> state = std::move(call->state);
    if (state->grpc_call == call.get()) {
      state->grpc_call = nullptr;
    }
    Finish(state, call->seq, std::move(result));
  }

  // Ends the probe `seq` of `state` exactly once: frees its slot, reports
  // the result (unless the target is gone) and schedules the next probe.
  void Finish(const std::shared_ptr<ProbeState>& state, uint64_t seq,
              ProbeResult result) {
    if (!state->in_flight || seq != state->op_seq) {
      return;
    }
    state->in_flight = false;
    --in_flight_;
    UnlinkTimeout(*state);
    if (state->op != nullptr) {
      // Closed explicitly: Asio's destructor would turn SO_LINGER 0 off
      // again and leave a TIME_WAIT socket behind every tcp probe.
      error_code ignored;
      state->op->socket.close(ignored);
      state->op.reset();
    }
    if (!state->removed && !stopping_) {
      result.latency = absl::Nanoseconds(MonotonicNanos() - state->started);
      sink_(*state->target, std::move(result));
      ScheduleNext(state);
    }
    DrainQueue();
  }

  const uint32_t max_in_flight_;
  const ResultSink sink_;
  std::mt19937_64 rng_;  // prober thread only

  // Declared before everything that owns sockets or timers so that it is
  // destroyed after them (the thread is joined in ~Impl first).
  asio::io_context io_;
  asio::steady_timer timer_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;

  // Prober thread only.
  absl::flat_hash_map<uint64_t, std::shared_ptr<ProbeState>> probes_;
  std::deque<std::shared_ptr<ProbeState>> waiting_;
  std::map<int64_t, std::vector<ScheduleEntry>> calendar_;  // by due tick
  std::vector<std::vector<ScheduleEntry>> spare_buckets_;
  // By (timeout, tick); nodes are stable, lists are never erased (there are
  // as many as distinct specs).
  std::map<std::pair<int64_t, int64_t>, TimeoutList> timeout_lists_;
  int64_t armed_due_ = std::numeric_limits<int64_t>::max();
  uint64_t arm_generation_ = 0;
  uint32_t in_flight_ = 0;
  bool stopping_ = false;

  // gRPC calls whose completion callback has not finished yet, and whether
  // StopNow has run (after which none start).
  std::mutex grpc_mu_;
  std::condition_variable grpc_idle_;
  uint64_t grpc_outstanding_ = 0;
  bool stopped_ = false;

  mutable std::mutex thread_mu_;
  bool shut_down_ = false;
  bool has_cpu_clock_ = false;
  clockid_t cpu_clock_{};
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<Prober>> Prober::Create(uint32_t max_in_flight,
                                                       uint64_t seed,
                                                       ResultSink sink) {
  auto impl = std::make_unique<Impl>(max_in_flight, seed, std::move(sink));
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
void Prober::Post(std::function<void()> fn) { impl_->Post(std::move(fn)); }
void Prober::Shutdown() { impl_->Shutdown(); }
absl::Duration Prober::CpuTime() const { return impl_->CpuTime(); }

}  // namespace aside::server::health_internal
