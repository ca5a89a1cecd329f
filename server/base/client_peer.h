// The client's address of a call. A plaintext port's connections reach gRPC
// through the guarded relay (server/net/guarded_relay.h) over a Unix socket
// pair whose abstract name carries the client's address, so gRPC's peer
// string is "unix-abstract:aside-relay/<pid>/<tag>/<seq>/ipv4:10.0.0.7:51234";
// ClientPeer turns it back into "ipv4:10.0.0.7:51234" for everything that
// reads a call's peer (logs, limits, auth). Pure functions; thread-safe.
#ifndef ASIDE_SERVER_BASE_CLIENT_PEER_H_
#define ASIDE_SERVER_BASE_CLIENT_PEER_H_

#include <string>

#include "absl/strings/string_view.h"

namespace aside::server {

// What the relay's socket names start with, after "unix-abstract:".
inline constexpr absl::string_view kRelayNamePrefix = "aside-relay/";

// The client's address of a call: what the relay's socket name carries, or
// `grpc_peer` itself for a connection that did not come through a relay.
std::string ClientPeer(absl::string_view grpc_peer);

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_CLIENT_PEER_H_
