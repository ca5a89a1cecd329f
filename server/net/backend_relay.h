// Sends the server's own gRPC channels to backends (grpc.health.v1 probes,
// ORCA streams) and to etcd through a loopback relay that bounds what the
// far end may send, before gRPC buffers it (server/net/h2_response_guard.h
// says why gRPC alone does not).
//
// A routed channel dials the relay, which listens on 127.0.0.1 (port 0),
// and asks for its backend with an HTTP CONNECT (gRPC's own handshake for
// proxies); the relay connects to the backend and moves the bytes both
// ways, reading those from the backend with an H2ResponseGuard. A backend
// that sends a message over the channel's limit, a compressed message or
// an oversized header block has its connection closed at once: the call
// fails as UNAVAILABLE, which a probe counts as a failure and an ORCA
// stream as its end. gRPC reconnects as it would after any lost
// connection. Each stop is counted (aside_backend_refused_total{kind,
// backend}) and logged (`backend.refused`, rate-limited with every log
// event).
//
// - The CONNECT request carries a token the relay made at start, so that no
//   other local process can use it as a proxy.
// - What one connection holds: 16 KiB in each direction; a side that does
//   not read stops the other through TCP.
// - A connection to a backend that does not answer is given up when gRPC
//   gives up on it (its own connect deadline), and after kConnectTimeout at
//   the latest; a failed one is answered 502, which the channel sees as a
//   failed connection.
// - Plaintext only: a TLS channel (etcd with TLS) is not routed, since its
//   bytes cannot be read; gRPC's own receive limit is all it has.
//
// Threads: one, `aside-backends` (an Asio io_context). Route() is
// thread-safe.
#ifndef ASIDE_SERVER_NET_BACKEND_RELAY_H_
#define ASIDE_SERVER_NET_BACKEND_RELAY_H_

#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/metrics.h"

namespace aside::server {

class BackendRelay {
 public:
  static constexpr auto kConnectTimeout = std::chrono::seconds(20);

  // `metrics` may be null (no counter); otherwise it outlives the relay.
  static absl::StatusOr<std::unique_ptr<BackendRelay>> Start(Metrics* metrics);
  // Closes every relayed connection and joins the thread.
  ~BackendRelay();
  BackendRelay(const BackendRelay&) = delete;
  BackendRelay& operator=(const BackendRelay&) = delete;

  // Routes a channel to `address` ("host:port", "a.b.c.d:port" or
  // "[v6]:port") through the relay: sets `args` and returns the target the
  // channel must dial. Each message from the backend may have at most
  // `max_message_bytes`. `kind` names the channel in the metric and the
  // log. The channel's authority is `authority`, or `address` when empty
  // (`args` must not set one).
  std::string Route(absl::string_view address, absl::string_view kind,
                    uint32_t max_message_bytes, grpc::ChannelArguments* args,
                    absl::string_view authority = {}) const;

  // Connections stopped so far, and relayed connections open now.
  uint64_t refused() const { return refused_.load(); }
  uint64_t open_connections() const { return open_.load(); }
  // The relay's loopback port (tests).
  int port() const { return port_; }

  class Impl;

 private:
  BackendRelay() = default;

  std::unique_ptr<Impl> impl_;
  std::string token_;
  int port_ = 0;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> open_{0};
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_BACKEND_RELAY_H_
