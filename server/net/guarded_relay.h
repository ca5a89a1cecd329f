// Moves a plaintext gRPC port's bytes between each client and gRPC through
// an H2RequestGuard (server/net/h2_request_guard.h), so that an oversized
// request is refused before gRPC buffers it.
//
// The connection gate (server/net/connection_gate.h) accepts a client and calls
// Adopt(); gRPC gets one end of a Unix socket pair, the relay keeps the
// other and the client's socket. The relay's end is bound to an abstract
// name that carries the client's address, so that gRPC's peer string
// ("unix-abstract:aside-relay/…/ipv4:10.0.0.7:51234") still names the
// client: ClientPeer() (server/base/client_peer.h) turns it back into
// "ipv4:10.0.0.7:51234" for everything that reads a call's peer. A bound
// socket that never listens
// takes no connections, so nothing else can reach gRPC through the name.
//
// - Each direction buffers at most kHighWater (256 KiB) before the relay
//   stops reading its source: a peer that does not read slows the other
//   down through TCP, as it would against gRPC directly.
// - An end-of-stream from the client is passed on (shutdown of the pair's
//   write side) once its bytes are. gRPC closing its end gives the client
//   what gRPC sent, then an end of stream (a FIN, so that nothing sent is
//   lost to a reset); the connection closes when the client closes too, or
//   after a grace of 1 s. An error on the client's side, and the guard's
//   failure, close both at once.
// - Threads: `threads` relay threads (epoll), connections spread round
//   robin; each connection lives on one thread and shares nothing but its
//   peer's reset budget (a ResetBucket, thread-safe).
//
// - A client past its reset budget (rapid reset, h2_request_guard.h) is
//   closed; the budget is its peer's (`resets_per_peer`), so reconnecting
//   does not refill it.
//
// Metrics: aside_limit_refused_total{limit=<options.guard.limit_name>
// without "limits.">} counts refused calls, {limit="max_stream_resets"}
// connections closed past their reset budget (server/base/metrics.h).
//
// Thread-safety: Adopt() from one thread (the gate's); the destructor from
// the owner once no Adopt() runs. Cost per connection: two descriptors and
// two epoll registrations more than gRPC alone, and per byte one read, one
// copy and one write more.
#ifndef ASIDE_SERVER_NET_GUARDED_RELAY_H_
#define ASIDE_SERVER_NET_GUARDED_RELAY_H_

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "server/base/metrics.h"
#include "server/net/h2_request_guard.h"

namespace aside::server {

struct GuardedRelayOptions {
  H2RequestGuardOptions guard;
  int threads = 1;           // at least 1
  std::string tag = "grpc";  // in the socket names: which port
  // The reset budget (guard.max_resets) and the stream cap
  // (max_streams_per_peer) shared by all connections of one peer
  // (server/net/peer_admission.h's PeerKey), so that reconnecting does not
  // refill them; false: each connection has its own reset budget and no
  // peer stream cap (behind a proxy every connection has the same address).
  bool resets_per_peer = true;
  // Streams one peer, and the whole port, may hold open at once (0: no
  // cap); one more is refused at its HEADERS (h2_request_guard.h).
  uint32_t max_streams_per_peer = 0;
  uint32_t max_streams = 0;
  Metrics* metrics = nullptr;  // not null; outlives the relay
};

class GuardedRelay {
 public:
  static constexpr size_t kHighWater = 256 << 10;

  static std::unique_ptr<GuardedRelay> Start(GuardedRelayOptions options);
  GuardedRelay(const GuardedRelay&) = delete;
  GuardedRelay& operator=(const GuardedRelay&) = delete;
  // Closes every relayed connection and joins the threads.
  ~GuardedRelay();

  // Takes `client` (a connected socket) whose address is `addr`, and
  // returns the descriptor for gRPC; or -1 (errno set) and `client` stays
  // the caller's.
  int Adopt(int client, const sockaddr* addr, socklen_t len);

  class Worker;

 private:
  GuardedRelay() = default;
  // The reset budget and stream counts for a connection from `addr` (a null
  // budget: the guard's own).
  PeerShares SharesFor(const sockaddr* addr, socklen_t len);

  GuardedRelayOptions options_;
  uint64_t next_seq_ = 0;
  size_t next_worker_ = 0;
  // Per peer key; touched only by Adopt(), and swept of what is unheld and
  // back at its start when it reaches `peers_swept_at_` entries.
  absl::flat_hash_map<std::string, PeerShares> peers_;
  size_t peers_swept_at_ = 1024;
  std::shared_ptr<StreamCount> all_streams_;  // null: no cap
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

// gRPC's form of a socket address: "ipv4:1.2.3.4:5", "ipv6:[::1]:5" (a
// v4-mapped IPv6 address in the IPv4 form, as gRPC writes it).
std::string GrpcPeerString(const sockaddr* addr, socklen_t len);

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_GUARDED_RELAY_H_
