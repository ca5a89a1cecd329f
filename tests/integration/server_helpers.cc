#include "tests/integration/server_helpers.h"

#include <dirent.h>
#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace aside::testing {

absl::StatusOr<RunningServer> StartServer(const std::string& state_dir,
                                          std::vector<std::string> extra,
                                          std::vector<std::string> wrapper) {
  std::vector<std::string> argv = std::move(wrapper);
  argv.insert(argv.end(),
              {BinDir() + "/aside-server", "--listen", "127.0.0.1:0",
               "--metrics", "127.0.0.1:0", "--state-dir", state_dir});
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto process = Process::Start(argv);
  if (!process.ok()) {
    return process.status();
  }
  RunningServer s;
  s.process = *std::move(process);
  auto started =
      s.process->WaitForLine("event=server.started", absl::Seconds(30));
  if (!started.ok()) {
    return started.status();
  }
  for (const std::string& line : s.process->stderr_lines()) {
    const std::string port = LogField(line, "port");
    if (port.empty()) {
      continue;
    }
    if (line.find("event=grpc.listening") != std::string::npos) {
      s.grpc_port = std::stoi(port);
    } else if (line.find("event=metrics.listening") != std::string::npos) {
      s.metrics_port = std::stoi(port);
    } else if (line.find("event=health.listening") != std::string::npos) {
      s.health_port = std::stoi(port);
    }
  }
  return s;
}

std::map<std::string, int> ThreadNames(pid_t pid) {
  std::map<std::string, int> names;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) {
    return names;
  }
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') {
      continue;
    }
    std::ifstream comm(absl::StrCat(tasks, "/", entry->d_name, "/comm"));
    std::string name;
    if (std::getline(comm, name)) {
      ++names[name];
    }
  }
  closedir(dir);
  return names;
}

absl::StatusOr<std::set<std::string>> DocumentedThreadNames() {
  const std::string path = SourceDir() + "/docs/operations.md";
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::set<std::string> names;
  bool in_section = false;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "## ")) {
      in_section = line == "## Threads";
      continue;
    }
    absl::string_view cell = line;
    if (!in_section || !absl::ConsumePrefix(&cell, "| `")) {
      continue;
    }
    names.insert(std::string(cell.substr(0, cell.find('`'))));
  }
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, " has no thread table under \"## Threads\""));
  }
  return names;
}

std::vector<std::string> UndocumentedThreads(
    const std::map<std::string, int>& threads,
    const std::set<std::string>& documented) {
  std::vector<std::string> out;
  for (const auto& [name, count] : threads) {
    if (absl::StartsWith(name, "aside-") && !documented.contains(name)) {
      out.push_back(name);
    }
  }
  return out;
}

std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) {
    c->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  return c;
}

absl::Status StopServer(RunningServer& server, absl::Duration wait) {
  if (server.process == nullptr) {
    return absl::OkStatus();
  }
  server.process->Signal(SIGTERM);
  const std::optional<int> status = server.process->Wait(wait);
  server.process->DrainStderr(absl::Seconds(5));
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "aside-server did not exit within ", absl::FormatDuration(wait),
        "; stderr:\n", server.process->StderrText()));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(absl::StrCat("aside-server exit status ",
                                            *status, "; stderr:\n",
                                            server.process->StderrText()));
  }
  return absl::OkStatus();
}

}  // namespace aside::testing
