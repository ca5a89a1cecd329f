#include "server/net/http_server.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <exception>
#include <map>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/address.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/net/peer_admission.h"

namespace aside::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr auto kFirstAcceptBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxAcceptBackoff = std::chrono::seconds(1);
// Each kind of warning is passed on at most this often.
constexpr auto kWarnInterval = std::chrono::seconds(10);
// How long Stop() lets the thread finish on its own before it stops the
// io_context outright (only a bug would leave work behind once every
// socket is closed).
constexpr absl::Duration kStopGrace = absl::Seconds(2);

// Sent, best effort, to a connection beyond a cap before it is closed.
constexpr absl::string_view kBusyResponse =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 25\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "\r\n"
    "too many connections, retry\n";

enum class CloseReason {
  kPeerClosed,
  kHeaderTimeout,
  kIdleTimeout,
  kWriteTimeout,
  kBadRequest,
  kNotKeepAlive,
  kShutdown,
  kError,
  kEvicted,
};
constexpr size_t kCloseReasons = 9;
constexpr std::array<const char*, kCloseReasons> kCloseReasonNames = {
    "peer_closed",   "header_timeout", "idle_timeout",
    "write_timeout", "bad_request",    "not_keep_alive",
    "shutdown",      "error",          "evicted"};

enum class RejectReason { kTotalLimit, kPeerLimit };
constexpr std::array<const char*, 2> kRejectReasonNames = {"total_limit",
                                                           "peer_limit"};

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

absl::string_view View(beast::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// The server's own metrics; every call is a no-op without a registry.
class HttpMetrics {
 public:
  explicit HttpMetrics(prometheus::Registry* registry) : registry_(registry) {
    if (registry == nullptr) {
      return;
    }
    accepted_ = &prometheus::BuildCounter()
                     .Name("aside_http_connections_accepted_total")
                     .Help("Connections accepted on the HTTP (metrics) port.")
                     .Register(*registry)
                     .Add({});
    auto& rejected = prometheus::BuildCounter()
                         .Name("aside_http_connections_rejected_total")
                         .Help(
                             "Connections closed at once because a cap was "
                             "reached, by reason.")
                         .Register(*registry);
    for (size_t i = 0; i < kRejectReasonNames.size(); ++i) {
      rejected_[i] = &rejected.Add({{"reason", kRejectReasonNames[i]}});
    }
    auto& closed = prometheus::BuildCounter()
                       .Name("aside_http_connections_closed_total")
                       .Help("Accepted connections closed, by reason.")
                       .Register(*registry);
    for (size_t i = 0; i < kCloseReasons; ++i) {
      closed_[i] = &closed.Add({{"reason", kCloseReasonNames[i]}});
    }
    open_ = &prometheus::BuildGauge()
                 .Name("aside_http_connections_open")
                 .Help("Connections open on the HTTP (metrics) port.")
                 .Register(*registry)
                 .Add({});
    accept_errors_ = &prometheus::BuildCounter()
                          .Name("aside_http_accept_errors_total")
                          .Help(
                              "Failed accepts on the HTTP (metrics) port "
                              "(retried after a backoff).")
                          .Register(*registry)
                          .Add({});
    requests_ = &prometheus::BuildCounter()
                     .Name("aside_http_requests_total")
                     .Help(
                         "HTTP requests answered, by route (\"other\" for "
                         "unknown paths) and status code.")
                     .Register(*registry);
  }

  void Accepted() {
    if (registry_ != nullptr) {
      accepted_->Increment();
      open_->Increment();
    }
  }
  void Rejected(RejectReason reason) {
    if (registry_ != nullptr) {
      rejected_[static_cast<size_t>(reason)]->Increment();
    }
  }
  void Closed(CloseReason reason) {
    if (registry_ != nullptr) {
      closed_[static_cast<size_t>(reason)]->Increment();
      open_->Decrement();
    }
  }
  void AcceptError() {
    if (registry_ != nullptr) {
      accept_errors_->Increment();
    }
  }
  // Server thread only (the cache is not locked).
  void Request(const std::string& route, int code) {
    if (registry_ == nullptr) {
      return;
    }
    prometheus::Counter*& counter = request_cache_[{route, code}];
    if (counter == nullptr) {
      counter =
          &requests_->Add({{"path", route}, {"code", absl::StrCat(code)}});
    }
    counter->Increment();
  }

 private:
  prometheus::Registry* registry_;
  prometheus::Counter* accepted_ = nullptr;
  std::array<prometheus::Counter*, 2> rejected_{};
  std::array<prometheus::Counter*, kCloseReasons> closed_{};
  prometheus::Gauge* open_ = nullptr;
  prometheus::Counter* accept_errors_ = nullptr;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*>
      request_cache_;
};

// Passes a kind of warning on at most once per kWarnInterval, with the
// number left out since the last one.
class WarnLimiter {
 public:
  void Warn(const HttpServerOptions& options, absl::string_view event,
            const std::string& detail) {
    if (!options.warn) {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (last_.has_value() && now - *last_ < kWarnInterval) {
      ++suppressed_;
      return;
    }
    last_ = now;
    options.warn(event, suppressed_ == 0
                            ? detail
                            : absl::StrCat(detail, " (and ", suppressed_,
                                           " more since the last report)"));
    suppressed_ = 0;
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> last_;
  uint64_t suppressed_ = 0;
};

}  // namespace

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) {
      return value;
    }
  }
  return {};
}

namespace http_internal {
class Connection;
}  // namespace http_internal
using http_internal::Connection;

class HttpServer::Impl {
 public:
  explicit Impl(HttpServerOptions options)
      : options_(std::move(options)), metrics_(options_.registry) {}

  ~Impl() { Stop(); }

  void Route(std::string path, HttpHandler handler) {
    routes_[std::move(path)] = std::move(handler);
  }

  absl::StatusOr<int> Start(absl::string_view address);
  void Stop();
  size_t open_connections() const {
    return open_.load(std::memory_order_relaxed);
  }

  // ---- Server thread ----
  const HttpServerOptions& options() const { return options_; }
  bool stopping() const { return stopping_; }
  // Answers one request; `route` receives the metric label.
  HttpResponse Dispatch(const HttpRequest& request, std::string* route);
  void CountRequest(const std::string& route, int code) {
    metrics_.Request(route, code);
  }
  void Released(Connection* connection, const std::string& peer,
                CloseReason reason);
  // A connection delivered its first complete request headers: it can no
  // longer be evicted to make room.
  void Proven(Connection* connection);

 private:
  // At the total cap: closes the oldest connection that has not delivered
  // a complete request yet and stops counting it; false when there is none.
  bool EvictOldestUnproven();
  void Accept();
  void OnAccept(const beast::error_code& ec, tcp::socket socket);
  void Reject(tcp::socket& socket, RejectReason reason,
              const std::string& peer);
  void Run();

  const HttpServerOptions options_;
  absl::flat_hash_map<std::string, HttpHandler> routes_;
  std::atomic<size_t> open_{0};

  // Server thread only. Declared before io_ so that connections destroyed with
  // the io_context (only after an abnormal stop) can still unregister.
  HttpMetrics metrics_;
  absl::flat_hash_set<Connection*> connections_;
  // Connections that have not delivered a complete request yet, oldest
  // first (keyed by accept order), and which of them were evicted (closed
  // and uncounted, their destruction still pending).
  std::map<uint64_t, Connection*> unproven_;
  absl::flat_hash_set<Connection*> evicted_;
  uint64_t accepted_seq_ = 0;
  PeerAdmission admission_{options_.max_connections,
                           options_.max_connections_per_peer};
  bool stopping_ = false;
  std::chrono::steady_clock::duration backoff_ = kFirstAcceptBackoff;
  WarnLimiter accept_warnings_;
  WarnLimiter handler_warnings_;
  std::array<WarnLimiter, 2> reject_warnings_;

  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_backoff_{io_};

  Mutex mu_;  // Start/Stop
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // The thread left io_.run().
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Started by Start and checked by Stop under mu_; Stop joins it unlocked.
  std::thread thread_;
};

namespace http_internal {

// One accepted connection. Lives while an operation of its own is pending
// (handlers hold a shared_ptr); runs on the server thread only.
//
// Phases: header (from accept, or from the first byte of a later request,
// until the headers are complete: header_timeout), write (write_timeout),
// idle (after a response, until the next request's first byte:
// idle_timeout). One timer enforces the current phase's deadline by closing
// the socket, which ends the pending operation.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl* server, tcp::socket socket, std::string peer)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(server->options().max_header_bytes + 4096),
        peer_(std::move(peer)) {}

  ~Connection() {
    server_->Released(this, peer_, reason_.value_or(CloseReason::kError));
  }

  void Start() {
    Arm(server_->options().header_timeout, CloseReason::kHeaderTimeout);
    ReadHeader();
  }

  // Closes the connection now (server stop).
  void Shutdown() { Close(CloseReason::kShutdown); }
  // Closes the connection now to make room for another.
  void Evict() { Close(CloseReason::kEvicted); }

  const std::string& peer() const { return peer_; }
  uint64_t seq = 0;     // accept order (set by the server)
  bool proven = false;  // delivered a complete request

 private:
  void Arm(absl::Duration timeout, CloseReason reason) {
    timer_.expires_after(ToChrono(timeout));
    timer_.async_wait([self = shared_from_this(), seq = ++timer_seq_,
                       reason](const beast::error_code& ec) {
      if (!ec && seq == self->timer_seq_) {
        self->Close(reason);
      }
    });
  }

  void Close(CloseReason reason) {
    if (reason_.has_value()) {
      return;
    }
    reason_ = reason;
    ++timer_seq_;
    beast::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // Idle phase: waits for the next request's first byte.
  void WaitForRequest() {
    Arm(server_->options().idle_timeout, CloseReason::kIdleTimeout);
    socket_.async_wait(
        tcp::socket::wait_read,
        [self = shared_from_this()](const beast::error_code& ec) {
          if (self->reason_.has_value()) {
            return;
          }
          if (ec) {
            self->Close(CloseReason::kError);
            return;
          }
          self->Arm(self->server_->options().header_timeout,
                    CloseReason::kHeaderTimeout);
          self->ReadHeader();
        });
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(server_->options().max_header_bytes);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](const beast::error_code& ec, size_t) {
          self->OnHeader(ec);
        });
  }

  void OnHeader(const beast::error_code& ec) {
    if (reason_.has_value()) {
      return;  // timed out or shut down
    }
    if (ec == bhttp::error::end_of_stream ||
        ec == bhttp::error::partial_message || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      Close(CloseReason::kPeerClosed);
      return;
    }
    if (ec == bhttp::error::header_limit ||
        ec == bhttp::error::buffer_overflow) {
      RespondError(431, "request header too large\n");
      return;
    }
    if (ec && ec.category() ==
                  bhttp::make_error_code(bhttp::error::bad_target).category()) {
      RespondError(400, "malformed request\n");
      return;
    }
    if (ec) {
      Close(CloseReason::kError);
      return;
    }
    if (!proven) {
      proven = true;
      server_->Proven(this);
    }
    const auto& req = parser_->get();
    const bool has_body =
        parser_->chunked() || parser_->content_length().value_or(0) > 0;
    HttpRequest request;
    request.method = View(req.method_string());
    request.target = View(req.target());
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    if (q != absl::string_view::npos) {
      request.query = request.target.substr(q + 1);
    }
    for (const auto& field : req) {
      request.headers.emplace_back(View(field.name_string()),
                                   View(field.value()));
    }
    std::string route;
    HttpResponse response = server_->Dispatch(request, &route);
    if (has_body && response.status < 400) {
      response = HttpResponse{.status = 413,
                              .body = "request bodies are not accepted\n"};
    }
    const bool keep_alive =
        req.keep_alive() && !has_body && !server_->stopping();
    Respond(std::move(response), route, req.version(),
            req.method() == bhttp::verb::head, keep_alive,
            has_body ? CloseReason::kBadRequest : CloseReason::kNotKeepAlive);
  }

  // Answers a request that could not be parsed, then closes.
  void RespondError(int status, std::string body) {
    Respond(HttpResponse{.status = status, .body = std::move(body)}, "other",
            11, /*head=*/false, /*keep_alive=*/false, CloseReason::kBadRequest);
  }

  void Respond(HttpResponse response, const std::string& route,
               unsigned version, bool head, bool keep_alive,
               CloseReason close_reason) {
    if (response.status < 200 || response.status > 599) {
      response = HttpResponse{.status = 500, .body = "internal error\n"};
    }
    server_->CountRequest(route, response.status);
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(response.status), version);
    res->set(bhttp::field::content_type, response.content_type);
    for (auto& [name, value] : response.headers) {
      res->set(name, value);
    }
    res->content_length(response.body.size());
    res->keep_alive(keep_alive);
    if (!head) {
      res->body() = std::move(response.body);
    }
    Arm(server_->options().write_timeout, CloseReason::kWriteTimeout);
    bhttp::async_write(
        socket_, *res,
        [self = shared_from_this(), res, keep_alive, close_reason](
            const beast::error_code& ec, size_t) {
          if (self->reason_.has_value()) {
            return;
          }
          if (ec) {
            self->Close(ec == asio::error::broken_pipe ||
                                ec == asio::error::connection_reset
                            ? CloseReason::kPeerClosed
                            : CloseReason::kError);
            return;
          }
          if (!keep_alive) {
            self->Close(close_reason);
            return;
          }
          if (self->buffer_.size() > 0) {
            // A pipelined request is already here.
            self->Arm(self->server_->options().header_timeout,
                      CloseReason::kHeaderTimeout);
            self->ReadHeader();
          } else {
            self->WaitForRequest();
          }
        });
  }

  HttpServer::Impl* const server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> parser_;
  const std::string peer_;
  // Bumped whenever the deadline changes, so a timer that fired just
  // before it was re-armed does nothing.
  uint64_t timer_seq_ = 0;
  std::optional<CloseReason> reason_;  // set once closed
};

}  // namespace http_internal

absl::StatusOr<int> HttpServer::Impl::Start(absl::string_view address) {
  MutexLock lock(&mu_);
  if (started_) {
    return absl::FailedPreconditionError("http: server already started");
  }
  started_ = true;
  absl::StatusOr<Address> parsed = ParseListenAddress(address);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: bad listen address: ", parsed.status().message()));
  }
  beast::error_code ec;
  tcp::endpoint endpoint;
  if (parsed->is_ip()) {
    endpoint =
        tcp::endpoint(asio::ip::make_address(parsed->host, ec), parsed->port);
  } else {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(parsed->host, absl::StrCat(parsed->port),
                                    tcp::resolver::passive, ec);
    if (!ec && results.empty()) {
      ec = asio::error::host_not_found;
    }
    if (!ec) {
      endpoint = results.begin()->endpoint();
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: cannot resolve ", address, ": ", ec.message()));
  }
  auto fail = [&](const char* what) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(absl::StrCat(
        "http: cannot listen on ", address, ": ", what, ": ", ec.message()));
  };
  if (acceptor_.open(endpoint.protocol(), ec)) {
    return fail("open");
  }
  if (acceptor_.set_option(tcp::acceptor::reuse_address(true), ec)) {
    return fail("SO_REUSEADDR");
  }
  if (acceptor_.bind(endpoint, ec)) {
    return fail("bind");
  }
  if (acceptor_.listen(tcp::socket::max_listen_connections, ec)) {
    return fail("listen");
  }
  const int port = acceptor_.local_endpoint(ec).port();
  if (ec) {
    return fail("local address");
  }
  Accept();
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::exception& e) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return absl::ResourceExhaustedError(
        absl::StrCat("http: cannot start the server thread: ", e.what()));
  }
  return port;
}

void HttpServer::Impl::Run() {
  NameThisThread("aside-http");
  for (;;) {
    try {
      io_.run();
      break;
    } catch (const std::exception& e) {
      // A handler threw (for example bad_alloc while rendering); keep
      // serving the others.
      handler_warnings_.Warn(options_, "http.handler_error", e.what());
    }
  }
  MutexLock lock(&mu_);
  done_ = true;  // the unlock wakes Stop
}

void HttpServer::Impl::Stop() {
  mu_.Lock();
  if (!thread_.joinable()) {
    mu_.Unlock();
    return;
  }
  asio::post(io_, [this] {
    stopping_ = true;
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_backoff_.cancel();
    // Shutdown() does not destroy a connection (its pending handlers do, once
    // they run), so iterating is safe; copy anyway to keep it obvious.
    std::vector<Connection*> connections(connections_.begin(),
                                         connections_.end());
    for (Connection* s : connections) {
      s->Shutdown();
    }
  });
  if (!mu_.AwaitWithTimeout(Cond(&done_), kStopGrace)) {
    io_.stop();
  }
  mu_.Unlock();
  thread_.join();
}

void HttpServer::Impl::Accept() {
  acceptor_.async_accept(
      io_, [this](const beast::error_code& ec, tcp::socket socket) {
        OnAccept(ec, std::move(socket));
      });
}

void HttpServer::Impl::OnAccept(const beast::error_code& ec,
                                tcp::socket socket) {
  if (stopping_ || !acceptor_.is_open()) {
    return;
  }
  if (ec) {
    // EMFILE, ENFILE, ENOBUFS, ENOMEM and the like: the pending connection
    // stays in the backlog; try again after a backoff rather than spin.
    metrics_.AcceptError();
    accept_warnings_.Warn(
        options_, "http.accept_error",
        absl::StrCat(
            "accept failed: ", ec.message(), "; retrying in ",
            std::chrono::duration_cast<std::chrono::milliseconds>(backoff_)
                .count(),
            " ms"));
    accept_backoff_.expires_after(backoff_);
    backoff_ = std::min<std::chrono::steady_clock::duration>(backoff_ * 2,
                                                             kMaxAcceptBackoff);
    accept_backoff_.async_wait([this](const beast::error_code& wait_ec) {
      if (!wait_ec && !stopping_) {
        Accept();
      }
    });
    return;
  }
  backoff_ = kFirstAcceptBackoff;
  Accept();

  beast::error_code peer_ec;
  tcp::endpoint remote = socket.remote_endpoint(peer_ec);
  if (peer_ec) {
    return;  // already gone; the socket closes with this scope
  }
  std::string peer = PeerKey(remote.data(), remote.size());
  PeerAdmission::Refusal refusal = admission_.Check(peer);
  if (refusal == PeerAdmission::Refusal::kTotal && EvictOldestUnproven()) {
    refusal = admission_.Check(peer);
  }
  switch (refusal) {
    case PeerAdmission::Refusal::kTotal:
      Reject(socket, RejectReason::kTotalLimit, peer);
      return;
    case PeerAdmission::Refusal::kPerPeer:
      Reject(socket, RejectReason::kPeerLimit, peer);
      return;
    case PeerAdmission::Refusal::kNone:
      break;
  }
  admission_.Add(peer);
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto connection =
      std::make_shared<Connection>(this, std::move(socket), std::move(peer));
  connections_.insert(connection.get());
  connection->seq = ++accepted_seq_;
  unproven_.emplace(connection->seq, connection.get());
  open_.fetch_add(1, std::memory_order_relaxed);
  metrics_.Accepted();
  connection->Start();
}

void HttpServer::Impl::Reject(tcp::socket& socket, RejectReason reason,
                              const std::string& peer) {
  metrics_.Rejected(reason);
  reject_warnings_[static_cast<size_t>(reason)].Warn(
      options_, "http.connection_rejected",
      absl::StrCat(kRejectReasonNames[static_cast<size_t>(reason)],
                   ": connection from ", peer,
                   " closed (caps: ", options_.max_connections, " in total, ",
                   options_.max_connections_per_peer, " per peer)"));
  // Never block the server thread on a peer: one non-blocking write.
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(kBusyResponse.data(), kBusyResponse.size()),
                    ignored);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

void HttpServer::Impl::Released(Connection* connection, const std::string& peer,
                                CloseReason reason) {
  connections_.erase(connection);
  unproven_.erase(connection->seq);
  if (evicted_.erase(connection) == 0) {
    admission_.Remove(peer);  // an evicted one was uncounted at eviction
  }
  open_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.Closed(reason);
}

void HttpServer::Impl::Proven(Connection* connection) {
  unproven_.erase(connection->seq);
}

bool HttpServer::Impl::EvictOldestUnproven() {
  if (unproven_.empty()) {
    return false;
  }
  Connection* oldest = unproven_.begin()->second;
  unproven_.erase(unproven_.begin());
  evicted_.insert(oldest);
  admission_.Remove(oldest->peer());
  oldest->Evict();
  return true;
}

HttpResponse HttpServer::Impl::Dispatch(const HttpRequest& request,
                                        std::string* route) {
  auto it = routes_.find(request.path);
  if (it == routes_.end()) {
    *route = "other";
    return HttpResponse{.status = 404, .body = "not found\n"};
  }
  *route = it->first;
  if (request.method != "GET" && request.method != "HEAD") {
    return HttpResponse{.status = 405,
                        .body = "method not allowed\n",
                        .headers = {{"Allow", "GET, HEAD"}}};
  }
  try {
    return it->second(request);
  } catch (const std::exception& e) {
    handler_warnings_.Warn(options_, "http.handler_error",
                           absl::StrCat(it->first, ": ", e.what()));
    return HttpResponse{.status = 500, .body = "internal error\n"};
  }
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() = default;

void HttpServer::Route(std::string path, HttpHandler handler) {
  impl_->Route(std::move(path), std::move(handler));
}

absl::StatusOr<int> HttpServer::Start(absl::string_view address) {
  return impl_->Start(address);
}

void HttpServer::Stop() { impl_->Stop(); }

size_t HttpServer::open_connections() const {
  return impl_->open_connections();
}

}  // namespace aside::server
