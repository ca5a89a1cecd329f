#include "bench/load/latency.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace aside::bench {

double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after ')'.
  const size_t close = content.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::istringstream fields(content.substr(close + 2));
  std::string field;
  double utime = 0;
  double stime = 0;
  // state(3) ... utime is field 14, stime 15 (1-based in proc(5)).
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace aside::bench
