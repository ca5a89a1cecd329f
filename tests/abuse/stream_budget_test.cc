// limits.max_streams_per_peer: one address's streams of every kind count
// against one cap (Watch, ADS, health Watch, ReportLoad, unary calls in
// flight), so that what one peer's streams hold in memory is bounded
// however it spreads them over services; one more is refused with
// RESOURCE_EXHAUSTED naming the limit, and a stream that ends gives its
// place back.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

using ::testing::HasSubstr;
namespace discovery = ::envoy::service::discovery::v3;
namespace health = ::grpc::health::v1;

constexpr int kCap = 12;
constexpr char kLimit[] = "max_streams_per_peer";

std::unique_ptr<grpc::ClientContext> StreamContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(60));
  return context;
}

TEST(StreamBudgetTest, EveryKindOfStreamCountsAgainstOnePeerCap) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(
          dir.path() + "/state",
          {"--config",
           dir.WriteFile(
               "aside.yaml",
               absl::StrCat(R"(limits: {max_streams_per_peer: )", kCap, R"(}
load_reports: {auth: open}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)"))}));
  ASSERT_EQ(LimitRefused(server.metrics_port, kLimit), 0);
  auto channel =
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto lb = v1::LoadBalancer::NewStub(channel);
  auto ads = discovery::AggregatedDiscoveryService::NewStub(channel);
  auto hc = health::Health::NewStub(channel);

  // A third each of Watch, ADS and health Watch streams, each answered.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>>> watches;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<
      discovery::DiscoveryRequest, discovery::DiscoveryResponse>>>
      xds;
  std::vector<std::unique_ptr<grpc::ClientReader<health::HealthCheckResponse>>>
      probes;
  for (int i = 0; i < kCap / 3; ++i) {
    contexts.push_back(StreamContext());
    v1::WatchRequest w;
    w.add_groups("web");
    watches.push_back(lb->Watch(contexts.back().get(), w));
    v1::GroupUpdate update;
    ASSERT_TRUE(watches.back()->Read(&update)) << "watch " << i;

    contexts.push_back(StreamContext());
    xds.push_back(ads->StreamAggregatedResources(contexts.back().get()));
    discovery::DiscoveryRequest r;
    r.set_type_url("type.googleapis.com/envoy.config.listener.v3.Listener");
    r.add_resource_names("web");
    ASSERT_TRUE(xds.back()->Write(r));
    discovery::DiscoveryResponse response;
    ASSERT_TRUE(xds.back()->Read(&response)) << "ads " << i;

    contexts.push_back(StreamContext());
    health::HealthCheckRequest h;
    probes.push_back(hc->Watch(contexts.back().get(), h));
    health::HealthCheckResponse status;
    ASSERT_TRUE(probes.back()->Read(&status)) << "health watch " << i;
  }

  // At the cap: a Pick (a unary call is a stream while in flight) and a
  // ReportLoad stream are refused, naming the limit.
  v1::PickRequest pick;
  pick.set_group("web");
  v1::PickResponse picked;
  grpc::Status refused = lb->Pick(Context().get(), pick, &picked);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat("too many streams open at once: ", kCap,
                                     " (limits.max_streams_per_peer)")));
  {
    auto context = StreamContext();
    v1::ReportLoadResponse reply;
    auto report = lb->ReportLoad(context.get(), &reply);
    report->WritesDone();
    EXPECT_EQ(report->Finish().error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  EXPECT_GE(LimitRefused(server.metrics_port, kLimit), 2);

  // One stream ends: its place is given back.
  contexts.front()->TryCancel();
  EXPECT_TRUE(Eventually(
      [&] { return lb->Pick(Context().get(), pick, &picked).ok(); }));
  for (auto& context : contexts) {
    context->TryCancel();
  }
}

}  // namespace
}  // namespace aside::testing
