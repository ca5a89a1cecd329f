// Child processes for integration tests: start a binary, read its stderr
// lines with a deadline, signal it, wait for it with a deadline.
#ifndef ASIDE_TESTS_TESTING_PROCESS_H_
#define ASIDE_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aside::testing {

// A directory removed (recursively) when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `contents` to path()/name and returns the full path.
  std::string WriteFile(const std::string& name,
                        const std::string& contents) const;
  // WriteFile, readable and writable by the owner only (0600), as the
  // server wants its secret files (tokens, keys, credentials).
  std::string WriteSecret(const std::string& name,
                          const std::string& contents) const;

 private:
  std::string path_;
};

// The directory holding the project's binaries (env ASIDE_BIN_DIR, else the
// build tree this test was built in).
std::string BinDir();
// The source tree (env ASIDE_SOURCE_DIR, else the one built from).
std::string SourceDir();

class Process {
 public:
  // Starts `argv[0]` with `argv`; stdout is discarded unless
  // `capture_stdout`, stderr is captured line by line.
  static absl::StatusOr<std::unique_ptr<Process>> Start(
      std::vector<std::string> argv, bool capture_stdout = false);
  ~Process();  // SIGKILLs the process if it still runs.

  pid_t pid() const { return pid_; }

  // Waits for a stderr line containing `needle`; returns it, or an error
  // after `timeout` or when the process closes stderr first. Every line read
  // is kept (see stderr_lines()).
  absl::StatusOr<std::string> WaitForLine(const std::string& needle,
                                          absl::Duration timeout);
  // Reads stderr until EOF or `timeout`.
  void DrainStderr(absl::Duration timeout);
  // Reads whatever stderr holds now, without waiting (keeps a chatty child
  // from blocking on a full pipe).
  void ReadAvailable();
  const std::vector<std::string>& stderr_lines() const { return lines_; }
  std::string StderrText() const;
  std::string StdoutText();

  void Signal(int sig);
  // Waits for exit; returns the wait status, or nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);

 private:
  Process() = default;
  bool ReadSome(absl::Time deadline);

  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  int stdout_fd_ = -1;
  std::string partial_;
  std::vector<std::string> lines_;
  size_t scanned_ = 0;
  bool exited_ = false;
  int status_ = 0;
};

// Extracts key=value from a text log line ("port=50051" -> "50051").
std::string LogField(const std::string& line, const std::string& key);

// Runs a command to completion (bounded) and returns exit status and output.
struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
CommandResult RunCommand(std::vector<std::string> argv,
                         absl::Duration timeout = absl::Seconds(60));

// A free TCP port on 127.0.0.1 at the time of the call.
int PickUnusedPort();

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_PROCESS_H_
