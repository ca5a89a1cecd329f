#include "server/net/resource_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace aside::server {

absl::StatusOr<FileLimit> RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  FileLimit out{.before = limit.rlim_cur,
                .after = limit.rlim_cur,
                .hard = limit.rlim_max};
  rlim_t target = limit.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses more than nr_open descriptors per process.
    uint64_t nr_open = 1 << 20;
    std::ifstream in("/proc/sys/fs/nr_open");
    in >> nr_open;
    target = nr_open;
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= target) {
    return out;
  }
  limit.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("setrlimit(RLIMIT_NOFILE, ", target,
                                            "): ", std::strerror(errno)));
  }
  out.after = target;
  return out;
}

}  // namespace aside::server
