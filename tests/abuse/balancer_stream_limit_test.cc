// limits.max_balancer_streams_per_peer: one address holds at most that many
// grpclb and ADS streams (each service counted apart); one more is refused
// with RESOURCE_EXHAUSTED naming the limit and counted, and a stream that
// ends gives its place back.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

using ::testing::HasSubstr;
namespace lb = ::grpc::lb::v1;
namespace discovery = ::envoy::service::discovery::v3;

constexpr char kLimit[] = "max_balancer_streams_per_peer";
constexpr char kListenerType[] =
    "type.googleapis.com/envoy.config.listener.v3.Listener";

constexpr char kConfig[] = R"(limits: {max_balancer_streams_per_peer: 2}
groups:
  - name: web
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001]
)";

// One bidi stream: Open() sends the first request and reads the first
// answer (false when the server ended the stream instead).
template <typename Stub, typename Request, typename Response>
struct BidiStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<Request, Response>> stream;

  bool Open(const Request& first) {
    return stream->Write(first) && [&] {
      Response response;
      return stream->Read(&response);
    }();
  }
  grpc::Status Refusal() {
    stream->WritesDone();
    return stream->Finish();
  }
};

using GrpclbStream = BidiStream<lb::LoadBalancer::Stub, lb::LoadBalanceRequest,
                                lb::LoadBalanceResponse>;
using AdsStream =
    BidiStream<discovery::AggregatedDiscoveryService::Stub,
               discovery::DiscoveryRequest, discovery::DiscoveryResponse>;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(20);
}

TEST(BalancerStreamLimitTest, StreamsPastThePerPeerCapAreRefusedAndCounted) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kConfig)}));
  ASSERT_EQ(LimitRefused(server.metrics_port, kLimit), 0);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.grpc_port),
                          grpc::InsecureChannelCredentials());
  auto grpclb = lb::LoadBalancer::NewStub(channel);
  auto ads = discovery::AggregatedDiscoveryService::NewStub(channel);
  lb::LoadBalanceRequest initial;
  initial.mutable_initial_request()->set_name("web");
  discovery::DiscoveryRequest listener;
  listener.mutable_node()->set_id("stream-limit-test");
  listener.set_type_url(kListenerType);
  listener.add_resource_names("web");

  auto open_grpclb = [&] {
    auto s = std::make_unique<GrpclbStream>();
    s->context.set_deadline(Deadline());
    s->stream = grpclb->BalanceLoad(&s->context);
    return s;
  };
  auto open_ads = [&] {
    auto s = std::make_unique<AdsStream>();
    s->context.set_deadline(Deadline());
    s->stream = ads->StreamAggregatedResources(&s->context);
    return s;
  };

  std::vector<std::unique_ptr<GrpclbStream>> balancers;
  for (int i = 0; i < 2; ++i) {
    balancers.push_back(open_grpclb());
    ASSERT_TRUE(balancers.back()->Open(initial)) << i;
  }
  // The services count apart: two ADS streams beside the two grpclb ones.
  std::vector<std::unique_ptr<AdsStream>> xds;
  for (int i = 0; i < 2; ++i) {
    xds.push_back(open_ads());
    ASSERT_TRUE(xds.back()->Open(listener)) << i;
  }
  {
    std::unique_ptr<GrpclbStream> third = open_grpclb();
    EXPECT_FALSE(third->Open(initial));
    const grpc::Status s = third->Refusal();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("limits.max_balancer_streams"));
    EXPECT_THAT(s.error_message(), HasSubstr("127.0.0.1"));
    EXPECT_THAT(s.error_message(), HasSubstr("grpclb streams"));
  }
  {
    std::unique_ptr<AdsStream> third = open_ads();
    EXPECT_FALSE(third->Open(listener));
    const grpc::Status s = third->Refusal();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("ADS streams"));
  }
  EXPECT_EQ(LimitRefused(server.metrics_port, kLimit), 2);

  // A stream that ends gives its place back (the server learns of the
  // cancellation asynchronously: retried, bounded).
  balancers.front()->context.TryCancel();
  balancers.front()->stream->Finish();
  balancers.erase(balancers.begin());
  bool admitted = false;
  for (int attempt = 0; attempt < 100 && !admitted; ++attempt) {
    std::unique_ptr<GrpclbStream> again = open_grpclb();
    if (again->Open(initial)) {
      admitted = true;
      balancers.push_back(std::move(again));
    } else {
      again->Refusal();
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  EXPECT_TRUE(admitted);
  for (auto& s : balancers) {
    s->context.TryCancel();
  }
  for (auto& s : xds) {
    s->context.TryCancel();
  }
}

}  // namespace
}  // namespace aside::testing
