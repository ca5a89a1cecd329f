#include "bench/load/latency.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace aside::bench {
namespace {

// utime + stime from /proc/PID/stat, in clock ticks (10 ms), threads that
// exited included.
double StatCpuSeconds(int pid) {
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

}  // namespace

double ProcessCpuSeconds(int pid) {
  // The sum of every live thread's run time from schedstat, in
  // nanoseconds: the clock-tick figure of /proc/PID/stat is too coarse for
  // one update. Falls back to the latter without schedstat.
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) {
    return StatCpuSeconds(pid);
  }
  double total_ns = 0;
  bool any = false;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    std::ifstream in(dir + "/" + e->d_name + "/schedstat");
    double run_ns = 0;
    if (in >> run_ns) {
      total_ns += run_ns;
      any = true;
    }
  }
  closedir(tasks);
  return any ? total_ns * 1e-9 : StatCpuSeconds(pid);
}

double ThreadCpuSeconds(int pid, const std::string& name) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) {
    return 0;
  }
  double total_ns = 0;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') {
      continue;
    }
    const std::string task = dir + "/" + e->d_name;
    std::ifstream comm(task + "/comm");
    std::string thread_name;
    if (!std::getline(comm, thread_name) || thread_name != name) {
      continue;
    }
    std::ifstream in(task + "/schedstat");
    double run_ns = 0;
    if (in >> run_ns) {
      total_ns += run_ns;
    }
  }
  closedir(tasks);
  return total_ns / 1e9;
}

}  // namespace aside::bench
