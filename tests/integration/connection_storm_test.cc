// Connection storms against the real server binary: thousands of
// connections opened and closed (gRPC channels that start a Watch stream
// and a Pick, and raw TCP connections that send half an HTTP/2 preface and
// hang up). The server's resident memory must come back near where it was
// after a warm-up storm: per-connection state is freed, not accumulated.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::TempDir;

constexpr char kConfig[] = R"(groups:
  - name: web
    health_check: {kind: none}
    backends: [127.0.0.1:7001, 127.0.0.1:7002, 127.0.0.1:7003]
)";

// Resident memory of `pid` in KiB.
long RssKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return 0;
}

// `channels` gRPC connections, `batch` open at a time: each opens a Watch
// stream, reads the table, makes a Pick, and is torn down (the stream
// cancelled, the channel destroyed).
void GrpcStorm(int port, int channels, int batch) {
  const std::string target = absl::StrCat("127.0.0.1:", port);
  for (int done = 0; done < channels; done += batch) {
    struct Conn {
      std::shared_ptr<grpc::Channel> channel;
      std::unique_ptr<v1::LoadBalancer::Stub> stub;
      grpc::ClientContext watch_context;
      std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> watch;
    };
    std::vector<std::unique_ptr<Conn>> open;
    for (int i = 0; i < batch; ++i) {
      auto c = std::make_unique<Conn>();
      grpc::ChannelArguments args;
      // One connection per channel (no shared subchannel pool).
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      c->channel = grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args);
      c->stub = v1::LoadBalancer::NewStub(c->channel);
      c->watch_context.set_deadline(std::chrono::system_clock::now() +
                                    std::chrono::seconds(30));
      v1::WatchRequest request;
      request.add_groups("web");
      c->watch = c->stub->Watch(&c->watch_context, request);
      open.push_back(std::move(c));
    }
    for (auto& c : open) {
      v1::GroupUpdate update;
      ASSERT_TRUE(c->watch->Read(&update));
      ASSERT_TRUE(update.has_full());
      auto context = testing::Context();
      v1::PickRequest pick;
      pick.set_group("web");
      v1::PickResponse response;
      ASSERT_TRUE(c->stub->Pick(context.get(), pick, &response).ok());
    }
    for (auto& c : open) {
      c->watch_context.TryCancel();
      (void)c->watch->Finish();
    }
  }
}

// `connections` raw TCP connections that send part of the HTTP/2 client
// preface and close.
void TcpStorm(int port, int connections) {
  static constexpr char kHalfPreface[] = "PRI * HTTP/2.0\r\n";
  for (int i = 0; i < connections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    (void)send(fd, kHalfPreface, sizeof(kHalfPreface) - 1, MSG_NOSIGNAL);
    close(fd);
  }
}

TEST(ConnectionStormTest, ServerMemoryReturnsNearBaseline) {
  TempDir dir;
  const std::string config = dir.WriteFile("aside.yaml", kConfig);
  ASSERT_OK_AND_ASSIGN(testing::RunningServer server,
                       testing::StartServer(dir.path(), {"--config", config}));
  const pid_t pid = server.process->pid();
  constexpr int kBatch = 100;
  constexpr int kGrpcPerRound = 500;
  constexpr int kTcpPerRound = 1000;
  constexpr int kRounds = 3;

  // Warm-up: thread pools, arenas and caches reach their working size.
  GrpcStorm(server.grpc_port, kGrpcPerRound, kBatch);
  TcpStorm(server.grpc_port, kTcpPerRound);
  const long baseline = RssKib(pid);
  std::vector<long> after;
  for (int round = 0; round < kRounds; ++round) {
    GrpcStorm(server.grpc_port, kGrpcPerRound, kBatch);
    TcpStorm(server.grpc_port, kTcpPerRound);
    after.push_back(RssKib(pid));
  }
  // Closed connections are released asynchronously; allow the server a
  // bounded while to get there.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  long final_rss = RssKib(pid);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer keeps freed memory in its quarantine (256 MiB).
  constexpr long kMaxGrowthKib = (48 + 256) * 1024;
#else
  constexpr long kMaxGrowthKib = 48 * 1024;
#endif
  while (final_rss - baseline > kMaxGrowthKib && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    final_rss = RssKib(pid);
  }
  const int total = (kRounds + 1) * (kGrpcPerRound + kTcpPerRound);
  RecordProperty("connections", total);
  RecordProperty("rss_baseline_kib", static_cast<int>(baseline));
  RecordProperty("rss_final_kib", static_cast<int>(final_rss));
  std::string rounds;
  for (long r : after) {
    rounds += absl::StrCat(r, " ");
  }
  EXPECT_LT(final_rss - baseline, kMaxGrowthKib)
      << "baseline " << baseline << " KiB, after each round " << rounds
      << "KiB, final " << final_rss << " KiB";
  // No growth proportional to the connections made: the last rounds add
  // (almost) nothing over the first.
  EXPECT_LT(after.back() - after.front(), kMaxGrowthKib / 3)
      << "after each round " << rounds << "KiB";
  // And the server still serves.
  auto channel =
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto stub = v1::LoadBalancer::NewStub(channel);
  auto context = testing::Context();
  v1::PickRequest pick;
  pick.set_group("web");
  v1::PickResponse response;
  EXPECT_TRUE(stub->Pick(context.get(), pick, &response).ok());
}

}  // namespace
}  // namespace aside
