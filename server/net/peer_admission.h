// Connection caps shared by the ports that face untrusted peers (the gRPC
// port's accept loop, server/net/connection_gate.h, and the HTTP port,
// server/net/http_server.h): who counts as one peer, and how many
// connections each peer and all peers together may hold.
#ifndef ASIDE_SERVER_NET_PEER_ADMISSION_H_
#define ASIDE_SERVER_NET_PEER_ADMISSION_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace aside::server {

// The key a connection's peer is counted under: an IPv4 address as
// "10.0.0.1"; an IPv6 address by its /64 ("2001:db8:1:2::/64"), since one
// host commonly holds a whole /64; an IPv4-mapped IPv6 address as the IPv4
// address. Empty for other families (a unix socket), which are not capped.
std::string PeerKey(const sockaddr* addr, socklen_t len);

// Counts connections per peer key and in total against two caps. Not
// thread-safe: one owner thread (each server's accept loop) uses it.
class PeerAdmission {
 public:
  enum class Refusal { kNone, kTotal, kPerPeer };

  // A cap of 0 is no cap.
  PeerAdmission(size_t max_total, size_t max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}

  // Whether one more connection from `peer` fits (the total cap is checked
  // first). An empty key is held to the total cap only.
  Refusal Check(const std::string& peer) const;
  // Counts a connection admitted, or one closed (each Add once).
  void Add(const std::string& peer);
  void Remove(const std::string& peer);

  size_t total() const { return total_; }
  size_t of(const std::string& peer) const;
  size_t max_total() const { return max_total_; }
  size_t max_per_peer() const { return max_per_peer_; }

 private:
  const size_t max_total_;
  const size_t max_per_peer_;
  size_t total_ = 0;
  absl::flat_hash_map<std::string, uint32_t> per_peer_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_PEER_ADMISSION_H_
