// The gRPC port's accept loop. gRPC's own listener has no connection cap,
// and once accept() fails with EMFILE it stops accepting on the port for
// good; so Aside accepts the port's connections itself and hands each one
// to gRPC (grpc::ServerBuilder's external connection acceptor: TLS, the
// handshake timeout and the channel arguments apply as on gRPC's own
// listener, and gRPC reads the peer address from the socket).
//
// - A new connection waits here, unread, until it is readable (the first
//   byte of the HTTP/2 preface or of a TLS ClientHello) and only then goes
//   to gRPC. One that hangs up first, or is still silent after
//   `handshake_timeout`, is closed: silent connections never reach gRPC.
// - Caps (server/net/peer_admission.h): `max_connections` in total,
//   waiting and handed off, and `max_connections_per_peer` per peer (an
//   IPv4 address, an IPv6 /64; 0 is no cap). At the total cap the oldest
//   waiting connection is closed to make room; a connection beyond a cap
//   otherwise is closed at once, counted in
//   aside_limit_refused_total{limit} and logged (event
//   grpc.connection_refused, at most once per 10 s with a count).
// - gRPC closes a handed-off connection without telling: each is known by
//   its descriptor and the socket's SO_COOKIE, and an entry whose
//   descriptor no longer holds that socket is gone (checked every second,
//   before a refusal at most every 100 ms, and when accept returns the
//   descriptor number again).
// - Accept errors never stop the loop: on EMFILE or ENFILE (descriptors
//   gone before the cap) the oldest waiting connection is closed to make
//   room, or with none waiting a spare descriptor is closed to accept and
//   close the new connection, then reopened; on other errors accepting
//   pauses for 10 ms.
//
// Metrics: aside_grpc_connections{state="pending"|"active"},
// aside_grpc_connections_closed_total{reason="evicted"|"handshake_timeout"|
// "hung_up"}, aside_grpc_accept_errors_total, and
// aside_limit_refused_total{limit="max_connections"|
// "max_connections_per_peer"} (server/base/metrics.h).
//
// Thread-safety: Bind, Start and Stop from one owner thread; everything
// else lives on the gate's own thread (epoll), which shares no state.
// Cost per connection: a hash-map entry, one epoll
// registration while waiting and one getsockopt per second once handed off.
//
// With `relay` set, a handed-off connection goes to a GuardedRelay
// (server/net/guarded_relay.h), which refuses oversized requests before gRPC
// buffers them, and gRPC gets the relay's end of a socket pair.
#ifndef ASIDE_SERVER_NET_CONNECTION_GATE_H_
#define ASIDE_SERVER_NET_CONNECTION_GATE_H_

#include <grpcpp/server_builder.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/base/metrics.h"
#include "server/net/guarded_relay.h"

namespace aside::server {

struct ConnectionGateOptions {
  uint32_t max_connections = 1024;  // not 0
  uint32_t max_connections_per_peer = 0;
  absl::Duration handshake_timeout = absl::Seconds(10);
  Metrics* metrics = nullptr;  // not null; outlives the gate
  // Set: connections reach gRPC through a GuardedRelay with these options
  // (a plaintext port), and `metrics` is the relay's too.
  std::optional<GuardedRelayOptions> relay;
};

class ConnectionGate {
 public:
  // Binds `listen` ("host:port", "[v6]:port"; port 0 picks one) as gRPC
  // would: a wildcard host (0.0.0.0 or ::) binds [::] for both families
  // (0.0.0.0 without IPv6), a name binds every address it resolves to, all
  // on one port. Nothing is accepted before Start().
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Bind(
      const std::string& listen, ConnectionGateOptions options);
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;
  ~ConnectionGate();  // Stop()

  int port() const { return port_; }

  // Starts the accept thread, handing connections to `acceptor` (from the
  // started server's builder). Once.
  void Start(
      std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);
  // Stops accepting, closes the listeners and the waiting connections (not
  // those handed off: gRPC's shutdown ends them, through the relay if there
  // is one, which runs until the gate is destroyed) and joins the thread.
  // Idempotent.
  void Stop();

  class Loop;

 private:
  ConnectionGate() = default;

  std::vector<int> listeners_;
  int port_ = 0;
  int wake_ = -1;  // eventfd that stops the loop
  ConnectionGateOptions loop_options_;
  std::unique_ptr<GuardedRelay> relay_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

// The connection budget of a process whose open-file limit is
// `file_limit`: the limit minus a reserve of max(64, limit / 8)
// descriptors for everything else (probes, the health and metrics ports,
// the store), at least 1, divided by the descriptors one connection holds
// (1, or 3 through a relay). `configured` (0: not set) above it is lowered
// to it.
struct ConnectionBudget {
  uint32_t max_connections = 0;
  bool lowered = false;  // `configured` was above the budget
};
ConnectionBudget ConnectionBudgetFor(uint32_t configured, uint64_t file_limit,
                                     uint32_t descriptors_per_connection = 1);

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_CONNECTION_GATE_H_
