#include "server/net/http2_limits.h"

#include <algorithm>
#include <climits>

namespace aside::server {
namespace {

int Millis(absl::Duration d) {
  return static_cast<int>(
      std::min<int64_t>(INT_MAX, absl::ToInt64Milliseconds(d)));
}

}  // namespace

void ApplyAbuseLimits(const ServerConfig& config,
                      grpc::ServerBuilder& builder) {
  // A connection that never completes its handshake (TLS, HTTP/2 preface
  // and settings) is closed after this, instead of gRPC's two minutes.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             Millis(config.handshake_timeout));
  // Bounds how long one connection can keep going: the client gets a GOAWAY
  // (gRPC adds ±10 % jitter), then the grace for its calls, Watch streams
  // included (the stub reconnects and resumes from the generations it
  // holds). Also moves Watch streams onto new replicas after a scale-out.
  if (config.max_connection_age > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               Millis(config.max_connection_age));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               Millis(config.max_connection_age_grace));
  }
  // Keepalive enforcement: a ping without data sooner than the interval
  // after the previous one is a strike; past the strikes the connection
  // gets GOAWAY ENHANCE_YOUR_CALM and is closed. Zero strikes: unlimited.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      Millis(config.min_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             static_cast<int>(config.max_ping_strikes));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             static_cast<int>(config.max_metadata_bytes));
}

}  // namespace aside::server
