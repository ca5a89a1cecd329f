#include "tests/integration/deploy_fixtures.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aside::testing {

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<Process>> StartChild(
    std::vector<std::string> argv) {
  if (access("/usr/bin/setpriv", X_OK) == 0) {
    argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL"});
  }
  return Process::Start(std::move(argv));
}

// ---------------------------------------------------------- BackendProcess

absl::StatusOr<std::unique_ptr<BackendProcess>> BackendProcess::Start(
    absl::Duration latency) {
  std::unique_ptr<BackendProcess> b(new BackendProcess());
  absl::StatusOr<std::unique_ptr<Process>> p = StartChild(
      {ASIDE_DEPLOY_BACKEND_BIN, "--listen", "127.0.0.1:0", "--latency_ms",
       absl::StrCat(absl::ToInt64Milliseconds(latency))});
  if (!p.ok()) {
    return p.status();
  }
  b->process_ = *std::move(p);
  absl::StatusOr<std::string> line =
      b->process_->WaitForLine("event=greeter.listening", absl::Seconds(30));
  if (!line.ok()) {
    return line.status();
  }
  if (!absl::SimpleAtoi(LogField(*line, "port"), &b->port_) || b->port_ <= 0) {
    return absl::InternalError(absl::StrCat("deploy_backend said: ", *line));
  }
  b->address_ = absl::StrCat("127.0.0.1:", b->port_);
  return b;
}

BackendProcess::~BackendProcess() = default;

void BackendProcess::Poll() {
  process_->ReadAvailable();
  const std::vector<std::string>& lines = process_->stderr_lines();
  // Each report is cumulative: the last one says everything.
  const std::string* last = nullptr;
  for (; parsed_ < lines.size(); ++parsed_) {
    if (absl::StartsWith(lines[parsed_], "event=served ")) {
      last = &lines[parsed_];
    }
  }
  if (last == nullptr) {
    return;
  }
  if (int64_t now = 0; absl::SimpleAtoi(LogField(*last, "now_ns"), &now)) {
    reported_nanos_ = now;
  }
  for (absl::string_view entry :
       absl::StrSplit(LogField(*last, "calls"), ',', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(entry, ':');
    CallerCalls calls;
    if (fields.size() == 3 && absl::SimpleAtoi(fields[1], &calls.count) &&
        absl::SimpleAtoi(fields[2], &calls.last_nanos)) {
      calls_[fields[0]] = calls;
    }
  }
}

CallerCalls BackendProcess::Calls(const std::string& caller) const {
  auto it = calls_.find(caller);
  return it == calls_.end() ? CallerCalls() : it->second;
}

void BackendProcess::Kill() {
  process_->Signal(SIGKILL);
  process_->Wait(absl::Seconds(30));
  process_->DrainStderr(absl::Seconds(5));
  Poll();
}

// ------------------------------------------------------------------ totals

ClientTotals TotalsOf(const Process& process) {
  ClientTotals t;
  for (const std::string& line : process.stderr_lines()) {
    if (absl::StrContains(line, "event=call.failed")) {
      t.failures.push_back(line);
    } else if (absl::StrContains(line, "event=calls ") ||
               absl::StrContains(line, "event=client.stopped ")) {
      uint64_t ok = 0;
      uint64_t failed = 0;
      if (absl::SimpleAtoi(LogField(line, "ok"), &ok) &&
          absl::SimpleAtoi(LogField(line, "failed"), &failed)) {
        t.ok = ok;
        t.failed = failed;
        uint64_t from_cache = 0;
        if (absl::SimpleAtoi(LogField(line, "from_cache"), &from_cache)) {
          t.from_cache = from_cache;
        }
      }
    }
  }
  t.failed = std::max<uint64_t>(t.failed, t.failures.size());
  return t;
}

absl::Duration Percentile(std::vector<absl::Duration> values, double p) {
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(
      std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

}  // namespace aside::testing
