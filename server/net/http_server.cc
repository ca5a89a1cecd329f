// The HTTP server (http_server.h): HttpServer and its Impl, the acceptor,
// admission, dispatch, start and stop. One connection is
// http_connection.cc, the metrics http_metrics.cc; what they share is
// http_server_internal.h.
#include "server/net/http_server.h"

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
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/address.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/net/http_server_internal.h"
#include "server/net/peer_admission.h"

namespace aside::server {
namespace {

using http_internal::CloseReason;
using http_internal::Connection;
using http_internal::kFirstAcceptBackoff;
using http_internal::kMaxAcceptBackoff;
using http_internal::kRejectReasonNames;
using http_internal::kStopGrace;
using http_internal::RejectReason;
namespace asio = http_internal::asio;
namespace beast = http_internal::beast;
using tcp = http_internal::tcp;

// Sent, best effort, to a connection beyond a cap before it is closed.
constexpr absl::string_view kBusyResponse =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 25\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "\r\n"
    "too many connections, retry\n";

}  // namespace

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) {
      return value;
    }
  }
  return {};
}

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
