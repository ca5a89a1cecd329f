// Connections that never speak, against a server with a 1024 open-file
// limit: established clients keep being served, new clients and the health
// port get in, and the port keeps accepting afterwards
// (server/net/connection_gate.h); past limits.max_connections_per_peer one
// address is refused while others connect, and gets in again once its
// connections close.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

constexpr char kConfig[] = R"(groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)";

// A TCP connection from `source` to 127.0.0.1:`port`, connecting (not
// waited for); -1 on a local error.
int ConnectFrom(const char* source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -1;
  }
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0 &&
       errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits (bounded) for what the server does with a connection that sent the
// HTTP/2 preface: true when it answers (SETTINGS), false when it closes.
bool ServerAnswers(int fd, absl::Duration timeout) {
  static constexpr char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\x00\x00\x00\x04\x00\x00\x00\x00\x00";  // empty SETTINGS
  pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1 ||
      send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL) < 0) {
    return false;
  }
  p.events = POLLIN;
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) {
    return false;
  }
  char buf[64];
  return recv(fd, buf, sizeof(buf), 0) > 0;
}

grpc::Status Pick(v1::LoadBalancer::Stub& stub) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::PickRequest r;
  r.set_group("web");
  v1::PickResponse response;
  return stub.Pick(&c, r, &response);
}

std::unique_ptr<v1::LoadBalancer::Stub> NewStub(int port) {
  // A channel of its own (no subchannel sharing): a new connection.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::LoadBalancer::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials(), args));
}

// Enough descriptors here for the flood (the server's own are capped).
bool RaiseOwnFileLimit(rlim_t want) {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_max < want) {
    return false;
  }
  l.rlim_cur = std::max(l.rlim_cur, want);
  return setrlimit(RLIMIT_NOFILE, &l) == 0;
}

TEST(ConnectionFloodTest, SilentConnectionsPastTheFileLimitLockNobodyOut) {
  if (!RaiseOwnFileLimit(4096)) {
    GTEST_SKIP() << "needs 4096 open files in the test process";
  }
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kConfig),
                   "--health-listen", "127.0.0.1:0"},
                  {"/usr/bin/prlimit", "--nofile=1024:1024"}));
  auto established = NewStub(server.grpc_port);
  ASSERT_TRUE(Pick(*established).ok());

  // One client picks all along on its established connection.
  std::atomic<bool> stop{false};
  std::atomic<int> picks{0};
  std::atomic<int> failures{0};
  std::string first_failure;
  std::thread picker([&] {
    while (!stop.load()) {
      const grpc::Status s = Pick(*established);
      ++picks;
      if (!s.ok() && failures++ == 0) {
        first_failure = s.error_message();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });

  // 1500 connections from 127.0.0.2 that never send a byte.
  std::vector<int> silent;
  for (int i = 0; i < 1500; ++i) {
    const int fd = ConnectFrom("127.0.0.2", server.grpc_port);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    silent.push_back(fd);
  }
  // Every one is through the TCP handshake (or refused) before going on.
  for (int fd : silent) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    poll(&p, 1, 5000);
  }
  server.process->ReadAvailable();
  // The established client goes on picking while they are open.
  const int before = picks.load();
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       picks.load() < before + 20 && absl::Now() < deadline;) {
    absl::SleepFor(absl::Milliseconds(10));
  }

  // During the flood: a new client is served, and so is the health port.
  auto fresh = NewStub(server.grpc_port);
  const grpc::Status fresh_pick = Pick(*fresh);
  EXPECT_TRUE(fresh_pick.ok()) << fresh_pick.error_message();
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.health_port),
                          grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest hr;
  grpc::health::v1::HealthCheckResponse hresp;
  const grpc::Status h = health->Check(Context().get(), hr, &hresp);
  EXPECT_TRUE(h.ok()) << h.error_message();
  // The oldest silent connections made room for the newer ones.
  EXPECT_GT(
      ScrapedMetric(server.metrics_port,
                    "aside_grpc_connections_closed_total{reason=\"evicted\"}"),
      0);

  for (int fd : silent) {
    close(fd);
  }
  // After the flood the port still accepts.
  auto after = NewStub(server.grpc_port);
  const grpc::Status after_pick = Pick(*after);
  EXPECT_TRUE(after_pick.ok()) << after_pick.error_message();

  stop = true;
  picker.join();
  EXPECT_GT(picks.load(), 20);
  EXPECT_EQ(failures.load(), 0) << first_failure;
  server.process->ReadAvailable();
}

TEST(ConnectionFloodTest, PastThePerPeerCapOneAddressIsRefusedUntilItCloses) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(
          dir.path() + "/state",
          {"--config",
           dir.WriteFile("aside.yaml",
                         absl::StrCat("limits: {max_connections_per_peer: 8}\n",
                                      kConfig))}));
  constexpr absl::Duration kWait = absl::Seconds(5);
  // Eight connections from 127.0.0.2 that speak HTTP/2 (handed to gRPC).
  std::vector<int> eight;
  for (int i = 0; i < 8; ++i) {
    eight.push_back(ConnectFrom("127.0.0.2", server.grpc_port));
    ASSERT_TRUE(ServerAnswers(eight.back(), kWait)) << "connection " << i;
  }
  // The ninth is closed unanswered, and counted.
  const int ninth = ConnectFrom("127.0.0.2", server.grpc_port);
  EXPECT_FALSE(ServerAnswers(ninth, kWait));
  close(ninth);
  EXPECT_EQ(
      ScrapedMetric(server.metrics_port,
                    "aside_limit_refused_total{limit=\"max_connections_per_"
                    "peer\"}"),
      1);
  // Another address is not affected.
  auto other = NewStub(server.grpc_port);
  const grpc::Status s = Pick(*other);
  EXPECT_TRUE(s.ok()) << s.error_message();

  // Once the eight close (gRPC closes its side without telling Aside), the
  // address gets in again.
  for (int fd : eight) {
    close(fd);
  }
  bool admitted = false;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       !admitted && absl::Now() < deadline;) {
    const int fd = ConnectFrom("127.0.0.2", server.grpc_port);
    admitted = ServerAnswers(fd, kWait);
    close(fd);
    if (!admitted) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  EXPECT_TRUE(admitted);
}

// Descriptors running out before limits.max_connections (here: the file
// limit lowered under the running server) do not stop the port: silent
// connections make room.
TEST(ConnectionFloodTest,
     OutOfDescriptorsBeforeTheCapSilentConnectionsMakeRoom) {
  if (!RaiseOwnFileLimit(4096)) {
    GTEST_SKIP() << "needs 4096 open files in the test process";
  }
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kConfig)}));
  // 100 descriptors more than the server holds now.
  int open_now = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", server.process->pid(), "/fd"))) {
    (void)e;
    ++open_now;
  }
  const rlimit low{.rlim_cur = static_cast<rlim_t>(open_now + 100),
                   .rlim_max = static_cast<rlim_t>(open_now + 100)};
  ASSERT_EQ(prlimit(server.process->pid(), RLIMIT_NOFILE, &low, nullptr), 0)
      << std::strerror(errno);

  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectFrom("127.0.0.2", server.grpc_port);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    silent.push_back(fd);
  }
  for (int fd : silent) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    poll(&p, 1, 5000);
  }
  // A new client gets in: its connection takes a silent one's place.
  auto fresh = NewStub(server.grpc_port);
  const grpc::Status s = Pick(*fresh);
  EXPECT_TRUE(s.ok()) << s.error_message();
  for (int fd : silent) {
    close(fd);
  }
  server.process->ReadAvailable();
  bool logged = false;
  for (const std::string& line : server.process->stderr_lines()) {
    logged =
        logged || line.find("event=grpc.accept_error") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  // Once the flood is gone the metrics port has descriptors again.
  double errors = -1;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       errors <= 0 && absl::Now() < deadline;) {
    errors =
        ScrapedMetric(server.metrics_port, "aside_grpc_accept_errors_total");
    if (errors <= 0) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(ConnectionFloodTest, ASilentConnectionIsClosedAtTheHandshakeTimeout) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(
          dir.path() + "/state",
          {"--config", dir.WriteFile("aside.yaml",
                                     absl::StrCat("limits: {handshake_timeout: "
                                                  "300ms}\n",
                                                  kConfig))}));
  const int fd = ConnectFrom("127.0.0.2", server.grpc_port);
  ASSERT_GE(fd, 0);
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  char byte;
  EXPECT_EQ(recv(fd, &byte, 1, 0), 0);  // closed, nothing said
  close(fd);
  EXPECT_EQ(
      ScrapedMetric(
          server.metrics_port,
          "aside_grpc_connections_closed_total{reason=\"handshake_timeout\"}"),
      1);
}

}  // namespace
}  // namespace aside::testing
