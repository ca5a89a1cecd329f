// absl::Status <-> grpc::Status at the RPC edge, and the statuses every
// streaming service ends with.
#ifndef ASIDE_SERVER_BASE_STATUS_UTIL_H_
#define ASIDE_SERVER_BASE_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace aside::server {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) {
    return grpc::Status::OK;
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// What a stream or call ends with when the server shuts down, and when a
// write to its client failed.
inline grpc::Status ShuttingDownStatus() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
}
inline grpc::Status WriteFailedStatus() {
  return grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
}

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_STATUS_UTIL_H_
