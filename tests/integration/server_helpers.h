// Starting the real aside-server binary from integration tests.
#ifndef ASIDE_TESTS_INTEGRATION_SERVER_HELPERS_H_
#define ASIDE_TESTS_INTEGRATION_SERVER_HELPERS_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process.h"

namespace aside::testing {

// A running aside-server with the ports it logged.
struct RunningServer {
  std::unique_ptr<Process> process;
  int grpc_port = 0;
  int metrics_port = 0;
  int health_port = 0;
  std::string target() const {
    return "127.0.0.1:" + std::to_string(grpc_port);
  }
};

// Starts build/bin/aside-server with --listen 127.0.0.1:0 (unless `extra`
// sets it), --metrics 127.0.0.1:0 and --state-dir <state_dir>, plus `extra`,
// and waits (bounded) until it reports it has started. `wrapper` runs the
// server ({"/usr/bin/prlimit", "--nofile=1024:1024"}) when not empty.
absl::StatusOr<RunningServer> StartServer(
    const std::string& state_dir, std::vector<std::string> extra,
    std::vector<std::string> wrapper = {});

// Stops the server with SIGTERM and waits (bounded by `wait`) for it to
// exit: OK when it exited 0 (in sanitizer builds: with no report), else an
// error with its exit status and stderr. OK for a server never started.
absl::Status StopServer(RunningServer& server, absl::Duration wait);

// How many of process `pid`'s threads carry each name
// (/proc/<pid>/task/*/comm).
std::map<std::string, int> ThreadNames(pid_t pid);
// The thread names the table of docs/operations.md ("## Threads") lists.
absl::StatusOr<std::set<std::string>> DocumentedThreadNames();
// The names in `threads` that start with "aside-" and are not in
// `documented` (none, for a server whose threads are all documented).
std::vector<std::string> UndocumentedThreads(
    const std::map<std::string, int>& threads,
    const std::set<std::string>& documented);

// A client context with a 10 s deadline and, if given, a bearer token.
std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "");

}  // namespace aside::testing

#endif  // ASIDE_TESTS_INTEGRATION_SERVER_HELPERS_H_
