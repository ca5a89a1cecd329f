// Large groups, many groups and the fixed cost of one Admin update, measured
// in process with the server's own classes (bench/README.md, "Scale").
//
// Every figure is printed beside a floor measured in the same run (a bare
// vector copy, a bare protobuf encode of the same message, a bare SQLite
// commit of the same bytes, a bare YAML parse of the same file), as the
// min–max over the repetitions of the figure and of its ratio to the floor.
//
//   scale_bench [--quick] [--reps=3] [--part=update|large|many|lag]
//               [--backends=N] [--groups=N]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/scale/scale_common.h"
#include "server/base/log.h"

int main(int argc, char** argv) {
  using namespace aside::server;
  using namespace aside::server::scale;
  bool quick = false;
  int reps = 3;
  std::string part;
  size_t groups = 0;
  size_t large = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::atoi(arg.c_str() + 7));
    } else if (arg.rfind("--backends=", 0) == 0) {
      large = std::strtoul(arg.c_str() + 11, nullptr, 10);
    } else if (arg.rfind("--groups=", 0) == 0) {
      groups = std::strtoul(arg.c_str() + 9, nullptr, 10);
    } else if (arg.rfind("--part=", 0) == 0) {
      part = arg.substr(7);
    } else {
      std::fprintf(stderr,
                   "usage: scale_bench [--quick] [--reps=N] "
                   "[--part=large|many|update|lag] [--groups=N] "
                   "[--backends=N]\n");
      return 2;
    }
  }
  SetLogLevel(LogLevel::kWarn);
  const double min_seconds = quick ? 0.05 : 0.3;
  if (part.empty() || part == "update") {
    // First: the other parts leave a large, fragmented heap behind.
    SetLogLevel(LogLevel::kInfo);
    UpdateCost(quick ? std::vector<size_t>{10, 100, 1000}
                     : std::vector<size_t>{10, 100, 1000, 10000},
               reps, min_seconds);
  }
  SetLogLevel(LogLevel::kWarn);
  if (part.empty() || part == "large") {
    Header("One large group");
    for (size_t n : large > 0 ? std::vector<size_t>{large}
                    : quick   ? std::vector<size_t>{1000, 10000}
                              : std::vector<size_t>{1000, 10000, 100000}) {
      LargeGroup(n, reps, min_seconds);
    }
  }
  if (part.empty() || part == "many") {
    Header("Many groups");
    if (groups > 0) {
      ManyGroups(groups, 10, reps);
    } else if (quick) {
      ManyGroups(1000, 10, reps);
    } else {
      ManyGroups(100, 10, reps);
      ManyGroups(1000, 10, reps);
      ManyGroups(10000, 10, reps);
    }
  }
  if (part.empty() || part == "lag") {
    LaggingSubscriber({10, 100, 1000});
  }
  return 0;
}
