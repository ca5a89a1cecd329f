// The gRPC channel arguments that bound what one HTTP/2 peer can cost
// (limits.* in the config file; docs/hardening.md#http2-abuse).
#ifndef ASIDE_SERVER_NET_HTTP2_LIMITS_H_
#define ASIDE_SERVER_NET_HTTP2_LIMITS_H_

#include <grpcpp/server_builder.h>

#include "server/config/config.h"

namespace aside::server {

// Sets, on `builder`: the handshake timeout, max connection age and its
// grace, keepalive enforcement (the shortest ping interval accepted without
// data, and how many faster pings close the connection) and the largest
// request metadata.
void ApplyAbuseLimits(const ServerConfig& config, grpc::ServerBuilder& builder);

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_HTTP2_LIMITS_H_
