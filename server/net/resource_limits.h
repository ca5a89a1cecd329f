// Process resource limits the server adjusts at start.
#ifndef ASIDE_SERVER_NET_RESOURCE_LIMITS_H_
#define ASIDE_SERVER_NET_RESOURCE_LIMITS_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace aside::server {

struct FileLimit {
  uint64_t before = 0;  // soft limit found
  uint64_t after = 0;   // soft limit now
  uint64_t hard = 0;
};

// Raises the soft RLIMIT_NOFILE to the hard limit: every connection, probe
// and state file takes a descriptor, and the distribution default (1024)
// lets a burst of idle connections starve everything else. An infinite
// hard limit is capped at the kernel's nr_open. Returns the limits before
// and after.
absl::StatusOr<FileLimit> RaiseFileLimit();

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_RESOURCE_LIMITS_H_
