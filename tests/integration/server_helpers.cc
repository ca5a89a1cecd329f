#include "tests/integration/server_helpers.h"

#include "absl/strings/str_cat.h"

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

std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) {
    c->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  return c;
}

}  // namespace aside::testing
