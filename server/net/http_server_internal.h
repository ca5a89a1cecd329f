// Internal to the HTTP server (http_server.h): what its three files share.
// Only http_server.cc, http_connection.cc and http_metrics.cc include it.
//
//   - HttpServer::Impl (http_server.cc): the acceptor, admission (the
//     caps and eviction), dispatch to the routes, start and stop, on one
//     io_context and its thread;
//   - http_internal::Connection (http_connection.cc): one accepted
//     connection, its phases (header, write, idle) and their deadlines;
//   - http_internal::HttpMetrics (http_metrics.cc): the server's metrics;
//   - http_internal::WarnLimiter: rate-limited warnings;
//   - the close and reject reasons, named as the metrics label them.
#ifndef ASIDE_SERVER_NET_HTTP_SERVER_INTERNAL_H_
#define ASIDE_SERVER_NET_HTTP_SERVER_INTERNAL_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/net/http_server.h"
#include "server/net/peer_admission.h"

namespace aside::server {
namespace http_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

inline constexpr auto kFirstAcceptBackoff = std::chrono::milliseconds(10);
inline constexpr auto kMaxAcceptBackoff = std::chrono::seconds(1);
// Each kind of warning is passed on at most this often.
inline constexpr auto kWarnInterval = std::chrono::seconds(10);
// How long Stop() lets the thread finish on its own before it stops the
// io_context outright (only a bug would leave work behind once every
// socket is closed).
inline constexpr absl::Duration kStopGrace = absl::Seconds(2);

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
inline constexpr size_t kCloseReasons = 9;
inline constexpr std::array<const char*, kCloseReasons> kCloseReasonNames = {
    "peer_closed",   "header_timeout", "idle_timeout",
    "write_timeout", "bad_request",    "not_keep_alive",
    "shutdown",      "error",          "evicted"};

enum class RejectReason { kTotalLimit, kPeerLimit };
inline constexpr std::array<const char*, 2> kRejectReasonNames = {"total_limit",
                                                                  "peer_limit"};

inline std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

inline absl::string_view View(beast::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// The server's own metrics; every call is a no-op without a registry
// (http_metrics.cc).
class HttpMetrics {
 public:
  explicit HttpMetrics(prometheus::Registry* registry);
  void Accepted();
  void Rejected(RejectReason reason);
  void Closed(CloseReason reason);
  void AcceptError();
  // Server thread only (the cache is not locked).
  void Request(const std::string& route, int code);

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

class Connection;

}  // namespace http_internal

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
  void Released(http_internal::Connection* connection, const std::string& peer,
                http_internal::CloseReason reason);
  // A connection delivered its first complete request headers: it can no
  // longer be evicted to make room.
  void Proven(http_internal::Connection* connection);

 private:
  // At the total cap: closes the oldest connection that has not delivered
  // a complete request yet and stops counting it; false when there is none.
  bool EvictOldestUnproven();
  void Accept();
  void OnAccept(const http_internal::beast::error_code& ec,
                http_internal::tcp::socket socket);
  void Reject(http_internal::tcp::socket& socket,
              http_internal::RejectReason reason, const std::string& peer);
  void Run();

  const HttpServerOptions options_;
  absl::flat_hash_map<std::string, HttpHandler> routes_;
  std::atomic<size_t> open_{0};

  // Server thread only. Declared before io_ so that connections destroyed with
  // the io_context (only after an abnormal stop) can still unregister.
  http_internal::HttpMetrics metrics_;
  absl::flat_hash_set<http_internal::Connection*> connections_;
  // Connections that have not delivered a complete request yet, oldest
  // first (keyed by accept order), and which of them were evicted (closed
  // and uncounted, their destruction still pending).
  std::map<uint64_t, http_internal::Connection*> unproven_;
  absl::flat_hash_set<http_internal::Connection*> evicted_;
  uint64_t accepted_seq_ = 0;
  PeerAdmission admission_{options_.max_connections,
                           options_.max_connections_per_peer};
  bool stopping_ = false;
  std::chrono::steady_clock::duration backoff_ =
      http_internal::kFirstAcceptBackoff;
  http_internal::WarnLimiter accept_warnings_;
  http_internal::WarnLimiter handler_warnings_;
  std::array<http_internal::WarnLimiter, 2> reject_warnings_;

  http_internal::asio::io_context io_{1};
  http_internal::tcp::acceptor acceptor_{io_};
  http_internal::asio::steady_timer accept_backoff_{io_};

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

  ~Connection();

  void Start();
  // Closes the connection now (server stop).
  void Shutdown() { Close(CloseReason::kShutdown); }
  // Closes the connection now to make room for another.
  void Evict() { Close(CloseReason::kEvicted); }

  const std::string& peer() const { return peer_; }
  uint64_t seq = 0;     // accept order (set by the server)
  bool proven = false;  // delivered a complete request

 private:
  void Arm(absl::Duration timeout, CloseReason reason);
  void Close(CloseReason reason);
  // Idle phase: waits for the next request's first byte.
  void WaitForRequest();
  void ReadHeader();
  void OnHeader(const beast::error_code& ec);
  // Answers a request that could not be parsed, then closes.
  void RespondError(int status, std::string body);
  void Respond(HttpResponse response, const std::string& route,
               unsigned version, bool head, bool keep_alive,
               CloseReason close_reason);

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
}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_HTTP_SERVER_INTERNAL_H_
