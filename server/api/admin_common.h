// What the Admin service's files share (admin_service.cc: dispatch and the
// write path; admin_reads.cc; admin_writes.cc; admin_apply_changes.cc): its
// error answers and the result label of its metrics and logs. Only they
// include it.
#ifndef ASIDE_SERVER_API_ADMIN_COMMON_H_
#define ASIDE_SERVER_API_ADMIN_COMMON_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/backend.h"

namespace aside::server::admin_common {

// The names of the Group fields a write sets (policy, backends, ... orca):
// every top-level field but the name, which selects the group, and what
// the server reports (numbered 20 and up).
const std::vector<std::string>& GroupSettingPaths();

// INVALID_ARGUMENT with `message` (which names the field).
inline grpc::Status Invalid(std::string message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, std::move(message)};
}

// The metric and log label of a status: its canonical code name in lower
// case ("ok", "not_found", "permission_denied").
inline std::string CodeName(grpc::StatusCode code) {
  return absl::AsciiStrToLower(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
}

inline absl::Status GroupNotFound(const std::string& name) {
  return absl::NotFoundError(
      absl::StrCat("group '", EchoName(name), "' not found"));
}

}  // namespace aside::server::admin_common

#endif  // ASIDE_SERVER_API_ADMIN_COMMON_H_
