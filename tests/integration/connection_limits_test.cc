// Connections that never speak cannot lock real clients out: the server
// raises its open-files limit at start, and closes a connection that has
// not finished its handshake within limits.handshake_timeout. (A file
// limit so low that silent connections would exhaust it:
// tests/abuse/connection_flood_test.cc.)
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/status_macros.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

constexpr char kConfig[] = R"(load_reports: {auth: open}
limits: {handshake_timeout: 1s}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)";

struct Started {
  std::unique_ptr<Process> process;
  int port = 0;
};

// Starts aside-server under `prlimit --nofile=SOFT:HARD`.
absl::StatusOr<Started> StartLimited(const TempDir& dir,
                                     const std::string& nofile) {
  ASIDE_ASSIGN_OR_RETURN(
      auto process, Process::Start({"/usr/bin/prlimit", "--nofile=" + nofile,
                                    BinDir() + "/aside-server", "--config",
                                    dir.WriteFile("aside.yaml", kConfig),
                                    "--listen", "127.0.0.1:0", "--metrics", "",
                                    "--state-dir", dir.path() + "/state"}));
  Started s;
  s.process = std::move(process);
  ASIDE_ASSIGN_OR_RETURN(
      std::string line,
      s.process->WaitForLine("event=grpc.listening", absl::Seconds(30)));
  s.port = std::stoi(LogField(line, "port"));
  ASIDE_RETURN_IF_ERROR(
      s.process->WaitForLine("event=server.started", absl::Seconds(30))
          .status());
  return s;
}

// Opens `n` TCP connections that never send a byte.
std::vector<int> Silent(int port, int n) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      break;
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

// Whether the server closed `fd` (EOF or reset) within `timeout`; what
// it sent before (its SETTINGS, a GOAWAY) is read and dropped.
bool ClosedWithin(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[512];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return false;
    }
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <=
        0) {
      continue;
    }
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      return true;
    }
  }
}

grpc::Status Pick(int port, absl::Duration deadline) {
  auto stub = v1::LoadBalancer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
  c.set_wait_for_ready(true);
  v1::PickRequest r;
  r.set_group("web");
  v1::PickResponse response;
  return stub->Pick(&c, r, &response);
}

TEST(ConnectionLimitsTest, SoftFileLimitIsRaisedToTheHardOne) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(Started s, StartLimited(dir, "256:4096"));
  std::string line;
  for (const std::string& l : s.process->stderr_lines()) {
    if (l.find("event=limits.open_files") != std::string::npos) {
      line = l;
    }
  }
  EXPECT_EQ(LogField(line, "soft"), "4096");
  EXPECT_EQ(LogField(line, "was"), "256");
  // 400 silent connections fit under the raised limit; a Pick goes through.
  std::vector<int> silent = Silent(s.port, 400);
  EXPECT_TRUE(Pick(s.port, absl::Seconds(10)).ok());
  for (int fd : silent) {
    close(fd);
  }
}

TEST(ConnectionLimitsTest, SilentConnectionsAreClosedAfterTheHandshakeTimeout) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(Started s, StartLimited(dir, "256:4096"));
  std::vector<int> silent = Silent(s.port, 400);
  ASSERT_EQ(silent.size(), 400u);
  // A real client gets through while they are open.
  const grpc::Status picked = Pick(s.port, absl::Seconds(10));
  EXPECT_TRUE(picked.ok()) << picked.error_message();
  // They are closed after the 1 s timeout (bounded here generously), not
  // after gRPC's default two minutes.
  for (size_t i : {size_t{0}, silent.size() / 2, silent.size() - 1}) {
    EXPECT_TRUE(ClosedWithin(silent[i], absl::Seconds(20))) << i;
  }
  for (int fd : silent) {
    close(fd);
  }
  EXPECT_TRUE(Pick(s.port, absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace aside::testing
