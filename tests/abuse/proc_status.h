// A field of a process's /proc/<pid>/status in KiB (VmHWM: the peak
// resident set; VmSize: the address space), for the abuse suites' memory
// bounds.
#ifndef ASIDE_TESTS_ABUSE_PROC_STATUS_H_
#define ASIDE_TESTS_ABUSE_PROC_STATUS_H_

#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace aside::testing {

// -1 when the field is not there.
inline int64_t ProcStatusKiB(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream fields(line.substr(std::strlen(field)));
      int64_t kib = 0;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_ABUSE_PROC_STATUS_H_
