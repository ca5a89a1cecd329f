// Processes of the deploy tests (rolling_deploy_test.cc,
// stub_outage_test.cc): Greeter backend processes that say whom they
// served and when (deploy_backend.cc), and client processes that count
// their own calls (deploy_stub.cc and the stock grpclb and xDS clients,
// which all write `event=calls ok=N failed=M` and `event=call.failed`).
//
// Driven from the test thread only.
#ifndef ASIDE_TESTS_INTEGRATION_DEPLOY_FIXTURES_H_
#define ASIDE_TESTS_INTEGRATION_DEPLOY_FIXTURES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process.h"

namespace aside::testing {

// Now on CLOCK_MONOTONIC (std::chrono::steady_clock), the clock of the
// times deploy_backend reports: one clock for every process of the machine.
int64_t MonotonicNanos();

// Starts `argv` so that it dies with the test process even if the test
// never reaches its destructors (setpriv execs in place: the pid is the
// program's own).
absl::StatusOr<std::unique_ptr<Process>> StartChild(
    std::vector<std::string> argv);

// One caller's calls served by one backend.
struct CallerCalls {
  uint64_t count = 0;
  int64_t last_nanos = 0;  // MonotonicNanos() of the last; 0: none
};

// A deploy_backend process on 127.0.0.1, port chosen by the kernel, that
// takes `latency` to serve each call.
class BackendProcess {
 public:
  static absl::StatusOr<std::unique_ptr<BackendProcess>> Start(
      absl::Duration latency = absl::ZeroDuration());
  ~BackendProcess();

  int port() const { return port_; }
  // "127.0.0.1:<port>", as the group lists it.
  const std::string& address() const { return address_; }

  // Reads the reports the process wrote since the last call (never waits).
  void Poll();
  // As of the last report read.
  CallerCalls Calls(const std::string& caller) const;
  // When the last report read was written (MonotonicNanos(); 0: none): no
  // call arrived between a caller's last_nanos and then.
  int64_t reported_nanos() const { return reported_nanos_; }

  // SIGKILL: the process ends at once, with no grace of its own (a pod
  // whose server exits on SIGTERM). Reads its last reports.
  void Kill();

 private:
  BackendProcess() = default;
  std::unique_ptr<Process> process_;
  int port_ = 0;
  std::string address_;
  size_t parsed_ = 0;  // stderr lines parsed so far
  std::map<std::string, CallerCalls> calls_;
  int64_t reported_nanos_ = 0;
};

// What a client process counted, from its stderr so far: the last summary
// (event=calls or event=client.stopped) and every event=call.failed line;
// `failed` is at least the number of those lines.
struct ClientTotals {
  uint64_t ok = 0;
  uint64_t failed = 0;
  uint64_t from_cache = 0;  // deploy_stub only
  std::vector<std::string> failures;
};
ClientTotals TotalsOf(const Process& process);

// The nearest-rank percentile `p` (0 < p <= 100) of `values` (not empty).
absl::Duration Percentile(std::vector<absl::Duration> values, double p);

}  // namespace aside::testing

#endif  // ASIDE_TESTS_INTEGRATION_DEPLOY_FIXTURES_H_
