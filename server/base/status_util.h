// absl::Status <-> grpc::Status at the RPC edge.
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

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_STATUS_UTIL_H_
