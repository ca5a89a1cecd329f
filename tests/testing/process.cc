#include "tests/testing/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace aside::testing {

TempDir::TempDir() {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "aside-test-XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) {
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::WriteFile(const std::string& name,
                               const std::string& contents) const {
  const std::string full = path_ + "/" + name;
  std::filesystem::create_directories(
      std::filesystem::path(full).parent_path());
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out << contents;
  return full;
}

std::string TempDir::WriteSecret(const std::string& name,
                                 const std::string& contents) const {
  const std::string full = WriteFile(name, contents);
  std::filesystem::permissions(
      full,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
      std::filesystem::perm_options::replace);
  return full;
}

std::string BinDir() {
  const char* dir = std::getenv("ASIDE_BIN_DIR");
  return dir != nullptr ? dir : ASIDE_BIN_DIR;
}

std::string SourceDir() {
  const char* dir = std::getenv("ASIDE_SOURCE_DIR");
  return dir != nullptr ? dir : ASIDE_SOURCE_DIR;
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(
    std::vector<std::string> argv, bool capture_stdout) {
  int err_pipe[2];
  int out_pipe[2] = {-1, -1};
  if (pipe2(err_pipe, O_CLOEXEC) != 0 ||
      (capture_stdout && pipe2(out_pipe, O_CLOEXEC) != 0)) {
    return absl::InternalError("pipe failed");
  }
  std::vector<char*> args;
  for (std::string& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    if (capture_stdout) {
      dup2(out_pipe[1], 1);
    } else {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
    }
    // The child dies with the test (a crashed or killed test leaves no
    // servers behind).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The child must not inherit blocked signals from the test runner.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(err_pipe[1]);
  if (capture_stdout) {
    close(out_pipe[1]);
  }
  auto p = std::unique_ptr<Process>(new Process());
  p->pid_ = pid;
  p->stderr_fd_ = err_pipe[0];
  p->stdout_fd_ = out_pipe[0];
  return p;
}

Process::~Process() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
  if (stderr_fd_ >= 0) {
    close(stderr_fd_);
  }
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
  }
}

bool Process::ReadSome(absl::Time deadline) {
  if (stderr_fd_ < 0) {
    return false;
  }
  const int64_t ms =
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  pollfd pfd{stderr_fd_, POLLIN, 0};
  const int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
  if (r <= 0) {
    return r == 0 || errno == EINTR;
  }
  char buf[4096];
  const ssize_t n = read(stderr_fd_, buf, sizeof(buf));
  if (n <= 0) {
    close(stderr_fd_);
    stderr_fd_ = -1;
    if (!partial_.empty()) {
      lines_.push_back(partial_);
      partial_.clear();
    }
    return false;
  }
  partial_.append(buf, static_cast<size_t>(n));
  size_t pos;
  while ((pos = partial_.find('\n')) != std::string::npos) {
    lines_.push_back(partial_.substr(0, pos));
    partial_.erase(0, pos + 1);
  }
  return true;
}

absl::StatusOr<std::string> Process::WaitForLine(const std::string& needle,
                                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (; scanned_ < lines_.size(); ++scanned_) {
      if (lines_[scanned_].find(needle) != std::string::npos) {
        return lines_[scanned_++];
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no line with '", needle, "' within ", absl::FormatDuration(timeout),
          "; stderr so far:\n", StderrText()));
    }
    if (!ReadSome(deadline) && stderr_fd_ < 0) {
      for (; scanned_ < lines_.size(); ++scanned_) {
        if (lines_[scanned_].find(needle) != std::string::npos) {
          return lines_[scanned_++];
        }
      }
      return absl::UnavailableError(
          absl::StrCat("stderr closed before a line with '", needle,
                       "'; stderr:\n", StderrText()));
    }
  }
}

void Process::ReadAvailable() {
  while (stderr_fd_ >= 0) {
    pollfd pfd{stderr_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 0) <= 0) {
      return;
    }
    if (!ReadSome(absl::Now())) {
      return;
    }
  }
}

void Process::DrainStderr(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (stderr_fd_ >= 0 && absl::Now() < deadline) {
    ReadSome(deadline);
  }
}

std::string Process::StderrText() const { return absl::StrJoin(lines_, "\n"); }

std::string Process::StdoutText() {
  std::string out;
  if (stdout_fd_ < 0) {
    return out;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(stdout_fd_, buf, sizeof(buf))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void Process::Signal(int sig) {
  if (!exited_) {
    kill(pid_, sig);
  }
}

std::optional<int> Process::Wait(absl::Duration timeout) {
  if (exited_) {
    return status_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = status;
      return status;
    }
    if (absl::Now() >= deadline) {
      return std::nullopt;
    }
    // Keep the pipe drained so the child never blocks on a full stderr.
    if (stderr_fd_ >= 0) {
      ReadSome(absl::Now() + absl::Milliseconds(20));
    } else {
      usleep(10000);
    }
  }
}

std::string LogField(const std::string& line, const std::string& key) {
  const std::string needle = " " + key + "=";
  const size_t pos = line.find(needle);
  if (pos == std::string::npos) {
    return "";
  }
  const size_t start = pos + needle.size();
  const size_t end = line.find(' ', start);
  return line.substr(
      start, end == std::string::npos ? std::string::npos : end - start);
}

CommandResult RunCommand(std::vector<std::string> argv,
                         absl::Duration timeout) {
  CommandResult result;
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return result;
  }
  std::vector<char*> args;
  for (std::string& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(out_pipe[1], 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    pollfd pfd{out_pipe[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) {
      continue;
    }
    const ssize_t n = read(out_pipe[0], buf, sizeof(buf));
    if (n <= 0) {
      break;
    }
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

int PickUnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace aside::testing
