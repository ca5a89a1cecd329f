// Per-call ORCA: gRPC C++ 1.51 backends publish their load in each call's
// trailer with grpc's own CallMetricRecorder (tests/testing/
// call_metric_recording.h), the caller hands it to the C++ stub
// (PickHandle::RecordBackendMetrics), which forwards it with its load
// reports, and the server turns it into the group's weights (gRFC A58: the
// reporters' utilisation over the request rate they counted), which the
// stub's own picks then follow.
#include <grpcpp/ext/call_metric_recorder.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "helloworld.grpc.pb.h"
#include "lib/sync.h"
#include "server/server.h"
#include "tests/testing/call_metric_recording.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

// A backend whose utilisation is its call rate over the last second
// divided by its capacity (calls per second at utilisation 1), recorded on
// every call: a real server's CPU behaves so, and A58's weight, qps over
// utilisation, is then the capacity.
class CapacityBackend final : public helloworld::Greeter::Service {
 public:
  explicit CapacityBackend(double capacity) : capacity_(capacity) {
    grpc::ServerBuilder builder;
    aside::testing::EnableCallMetricRecording(&builder);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~CapacityBackend() override { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  grpc::Status SayHello(grpc::ServerContext* context,
                        const helloworld::HelloRequest*,
                        helloworld::HelloReply* reply) override {
    const absl::Time now = absl::Now();
    double rate = 0;
    {
      aside::MutexLock lock(&mu_);
      calls_.push_back(now);
      while (calls_.front() < now - absl::Seconds(1)) {
        calls_.pop_front();
      }
      rate = static_cast<double>(calls_.size());
    }
    context->ExperimentalGetCallMetricRecorder()->RecordCpuUtilizationMetric(
        rate / capacity_);
    reply->set_message("hello");
    return grpc::Status::OK;
  }

 private:
  const double capacity_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  aside::Mutex mu_;
  std::deque<absl::Time> calls_ ABSL_GUARDED_BY(mu_);
};

TEST(OrcaPerCallTest, TheStubsPerCallReportsBecomeTheWeights) {
  // Capacities 200, 200 and 50 calls/s: A58 weights in the ratio 4:4:1.
  CapacityBackend backends[] = {CapacityBackend(200), CapacityBackend(200),
                                CapacityBackend(50)};
  aside::testing::TempDir dir;
  const std::string yaml =
      absl::StrCat("state_dir: ", dir.path(), R"(
listen: 127.0.0.1:0
metrics: ""
limits: {load_window: 1s}
load_reports: {auth: open}
groups:
  - name: web
    policy: weighted_round_robin
    health_check: {kind: none}
    orca: {interval: 200ms, weights: true, blackout_period: 0s}
    backends: [)",
                   backends[0].address(), ", ", backends[1].address(), ", ",
                   backends[2].address(), "]\n");
  ASSERT_OK_AND_ASSIGN(ServerConfig config, ParseConfig(yaml, "t.yaml"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AsideServer> server,
                       AsideServer::Create(config));
  ASSERT_OK(server->Start());
  const std::string target = absl::StrCat("127.0.0.1:", server->grpc_port());
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Client> client,
      Client::Create(
          {.targets = {target}, .report_interval = absl::Milliseconds(200)}));
  ClientGroup* group = client->Group("web");
  std::map<std::string, std::unique_ptr<helloworld::Greeter::Stub>> stubs;
  for (const CapacityBackend& b : backends) {
    stubs[b.address()] = helloworld::Greeter::NewStub(
        grpc::CreateChannel(b.address(), grpc::InsecureChannelCredentials()));
  }

  // A table's weights as shares of their sum, by backend.
  auto shares_of = [&](const TableConstPtr& table) {
    std::vector<double> out;
    double sum = 0;
    for (const CapacityBackend& b : backends) {
      const int64_t i = table == nullptr ? -1 : table->Find(b.address());
      out.push_back(i < 0 ? 0 : table->member(static_cast<uint32_t>(i)).weight);
      sum += out.back();
    }
    for (double& s : out) {
      s = sum > 0 ? s / sum : 0;
    }
    return out;
  };
  const std::vector<double> want = {4.0 / 9, 4.0 / 9, 1.0 / 9};
  auto near = [&](const std::vector<double>& got) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] < want[i] - 0.03 || got[i] > want[i] + 0.03) {
        return false;
      }
    }
    return true;
  };

  {
    // Malformed reports and utilisation beyond the load report's bound
    // (10) are refused, recording nothing.
    absl::StatusOr<PickHandle> pick = group->Pick();
    ASSERT_OK(pick.status());
    EXPECT_FALSE(pick->RecordBackendMetrics("\x0b"));
    const char over[] = {0x09, 0, 0, 0, 0, 0, 0, 0x26, 0x40};  // cpu 11.0
    EXPECT_FALSE(pick->RecordBackendMetrics(absl::string_view(over, 9)));
    pick->Done(true);
  }

  // 300 calls/s through the stub's picks, each report handed to the stub,
  // until the server's table and the stub's have held the capacity ratio
  // for a second.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::Time held_since = absl::InfiniteFuture();
  std::vector<double> shares;
  std::vector<double> served;  // the server's table, which its Pick reads
  while (absl::Now() < deadline) {
    absl::StatusOr<PickHandle> pick = group->Pick();
    ASSERT_OK(pick.status());
    grpc::ClientContext context;
    helloworld::HelloRequest request;
    helloworld::HelloReply reply;
    const grpc::Status status = stubs[std::string(pick->address())]->SayHello(
        &context, request, &reply);
    ASSERT_TRUE(status.ok()) << status.error_message();
    // The standard trailer never reaches the application (gRPC's core
    // keeps it); the backend's mirror of the same bytes does.
    const auto& trailers = context.GetServerTrailingMetadata();
    ASSERT_EQ(trailers.count("endpoint-load-metrics-bin"), 0u);
    const auto mirrored = trailers.find(aside::testing::kMirroredReportKey);
    ASSERT_NE(mirrored, trailers.end());
    ASSERT_TRUE(pick->RecordBackendMetrics(
        absl::string_view(mirrored->second.data(), mirrored->second.size())));
    pick->Done(status);
    shares = shares_of(group->table());
    served = shares_of(server->groups().Find("web")->table());
    if (!near(shares) || !near(served)) {
      held_since = absl::InfiniteFuture();
    } else if (held_since == absl::InfiniteFuture()) {
      held_since = absl::Now();
    } else if (absl::Now() - held_since > absl::Seconds(1)) {
      break;
    }
    absl::SleepFor(absl::Microseconds(3333));  // the offered rate
  }
  ASSERT_TRUE(near(shares))
      << shares[0] << " : " << shares[1] << " : " << shares[2];
  EXPECT_TRUE(near(served))
      << served[0] << " : " << served[1] << " : " << served[2];
  client.reset();
  server->Shutdown(absl::Seconds(1));
  server->Wait();
}

}  // namespace
}  // namespace aside::server
