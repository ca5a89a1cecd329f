// ADS over real gRPC on loopback with a hand-driven client, and a tick
// that never comes in a test's time: whatever reaches the client after
// its first response was pushed by a group's publication, addition or
// removal. The client sends nothing after its request (no acknowledgement
// the server could answer instead).
#include "server/api/xds/ads_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "server/api/xds/xds_resources.h"
#include "tests/testing/eventually.h"
#include "tests/testing/group_specs.h"
#include "tests/testing/status_matchers.h"

namespace aside::server::xds {
namespace {

namespace discovery = envoy::service::discovery::v3;
using Stream = grpc::ClientReaderWriter<discovery::DiscoveryRequest,
                                        discovery::DiscoveryResponse>;

using ::aside::testing::PlainGroup;

// The endpoints a ClusterLoadAssignment response lists, per resource.
std::vector<int> Endpoints(const discovery::DiscoveryResponse& response) {
  std::vector<int> out;
  for (const google::protobuf::Any& any : response.resources()) {
    envoy::config::endpoint::v3::ClusterLoadAssignment cla;
    EXPECT_TRUE(any.UnpackTo(&cla));
    int n = 0;
    for (const auto& locality : cla.endpoints()) {
      n += locality.lb_endpoints_size();
    }
    out.push_back(n);
  }
  return out;
}

// The cluster the one Listener of a response routes to ("" without one).
std::string ListenerCluster(const discovery::DiscoveryResponse& response) {
  if (response.resources_size() != 1) {
    return "";
  }
  envoy::config::listener::v3::Listener listener;
  envoy::extensions::filters::network::http_connection_manager::v3::
      HttpConnectionManager manager;
  if (!response.resources(0).UnpackTo(&listener) ||
      !listener.api_listener().api_listener().UnpackTo(&manager)) {
    return "";
  }
  return manager.route_config().virtual_hosts(0).routes(0).route().cluster();
}

class AdsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
    ASSERT_OK(
        registry_->Add(PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80"})));
    ASSERT_OK(registry_->Add(PlainGroup("api", {"10.0.0.3:80"})));
    ads_ = std::make_unique<AdsService>(registry_.get(), &metrics_, nullptr,
                                        absl::Hours(24));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(ads_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = discovery::AggregatedDiscoveryService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    stream_ = stub_->StreamAggregatedResources(&context_);
  }
  void TearDown() override {
    context_.TryCancel();
    ads_->Shutdown();
    server_->Shutdown();
    ads_.reset();
  }
  // Asks for the endpoints of `names`.
  void Request(std::vector<std::string> names) {
    Request(stream_.get(), kEndpointType, std::move(names));
  }
  static void Request(Stream* stream, const char* type,
                      std::vector<std::string> names) {
    discovery::DiscoveryRequest request;
    request.set_type_url(type);
    for (const std::string& n : names) {
      request.add_resource_names(n);
    }
    ASSERT_TRUE(stream->Write(request));
  }

  // Another client stream on the same server.
  struct Client {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream;
  };
  std::unique_ptr<Client> Open() {
    auto c = std::make_unique<Client>();
    c->context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(30));
    c->stream = stub_->StreamAggregatedResources(&c->context);
    return c;
  }

  // The streams the fan-out woke since `before`, once it woke at least
  // `expected` (or 15 s passed). A stream may answer a change by itself
  // (a write's completion evaluates it again) before the fan-out thread
  // counts it, so a count read right after a response could lag.
  uint64_t WokenSince(uint64_t before, uint64_t expected) {
    ::aside::testing::Eventually(
        [&] { return ads_->streams_woken() - before >= expected; });
    return ads_->streams_woken() - before;
  }

  double Responses(const char* type) {
    return metrics_.xds_responses.Add({{"type", type}}).Value();
  }

  Metrics metrics_;
  std::unique_ptr<GroupRegistry> registry_;
  std::unique_ptr<AdsService> ads_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<discovery::AggregatedDiscoveryService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
};

TEST_F(AdsServiceTest, PublicationsAndRemovalsOfAUsedGroupArePushed) {
  Request({"web"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(2));

  // A group the stream does not use: nothing for it. Then one it uses.
  ASSERT_OK(
      registry_->Update(registry_->Find("api"),
                        PlainGroup("api", {"10.0.0.4:80", "10.0.0.5:80"})));
  const std::string before = response.version_info();
  ASSERT_OK(registry_->Update(
      registry_->Find("web"),
      PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.6:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_NE(response.version_info(), before);
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(3));

  // Its removal takes its resource away.
  ASSERT_OK(registry_->Remove("web"));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(response.resources_size(), 0);
}

TEST_F(AdsServiceTest, AGroupAddedAnswersANameThatHadNoneAtOnce) {
  Request({"later"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(response.resources_size(), 0);

  ASSERT_OK(registry_->Add(PlainGroup("later", {"10.0.0.7:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(1));
}

// A request past a cap ends the stream with a status naming the cap: the
// client sees why, instead of waiting for resources that never come.
TEST_F(AdsServiceTest, ARequestPastTheNameCapEndsTheStreamNamingIt) {
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) {
    names.push_back(absl::StrCat("name", i));
  }
  names.push_back("web");
  Request(names);
  discovery::DiscoveryResponse response;
  EXPECT_FALSE(stream_->Read(&response));
  const grpc::Status status = stream_->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("at most 1000"));
}

TEST_F(AdsServiceTest, ARequestWithATooLongNameEndsTheStreamNamingTheCap) {
  Request({"web", std::string(513, 'x')});
  discovery::DiscoveryResponse response;
  EXPECT_FALSE(stream_->Read(&response));
  const grpc::Status status = stream_->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("513 bytes; at most 512"));
}

// At the caps, a request is answered.
TEST_F(AdsServiceTest, ARequestAtTheCapsIsAnswered) {
  std::vector<std::string> names;
  for (int i = 0; i < 999; ++i) {
    names.push_back(absl::StrCat("name", i));
  }
  names.push_back("web");
  names.push_back(std::string(512, 'y'));
  names.erase(names.begin());
  Request(names);
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(2));
}

// The fan-out touches only the streams a change concerns: an update of one
// group marks its own streams (one each, one response each) and not the
// many streams of another group, which receive nothing.
TEST_F(AdsServiceTest, AnUpdateReachesOnlyTheStreamsOfItsGroup) {
  Request({"web"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  constexpr int kApiStreams = 20;
  std::vector<std::unique_ptr<Client>> api;
  for (int i = 0; i < kApiStreams; ++i) {
    api.push_back(Open());
    Request(api.back()->stream.get(), kEndpointType, {"api"});
    discovery::DiscoveryResponse first;
    ASSERT_TRUE(api.back()->stream->Read(&first));
    EXPECT_THAT(Endpoints(first), ::testing::ElementsAre(1));
  }

  const uint64_t woken = ads_->streams_woken();
  const double sent = Responses("endpoint");
  ASSERT_OK(registry_->Update(
      registry_->Find("web"),
      PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.6:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(3));
  EXPECT_EQ(WokenSince(woken, 1), 1u);
  EXPECT_EQ(Responses("endpoint") - sent, 1);

  // The other group's update: one response on each of its streams, none
  // on the first one.
  ASSERT_OK(
      registry_->Update(registry_->Find("api"),
                        PlainGroup("api", {"10.0.0.4:80", "10.0.0.5:80"})));
  for (const auto& c : api) {
    discovery::DiscoveryResponse update;
    ASSERT_TRUE(c->stream->Read(&update));
    EXPECT_THAT(Endpoints(update), ::testing::ElementsAre(2));
  }
  EXPECT_EQ(WokenSince(woken, 1 + kApiStreams), 1u + kApiStreams);
  EXPECT_EQ(Responses("endpoint") - sent, 1 + kApiStreams);
  // The next message on the first stream is its own group's next change.
  ASSERT_OK(registry_->Update(registry_->Find("web"),
                              PlainGroup("web", {"10.0.0.1:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(1));
  EXPECT_EQ(Responses("endpoint") - sent, 2 + kApiStreams);
  for (const auto& c : api) {
    c->context.TryCancel();
  }
}

// An acknowledgement with the same names is answered with nothing, and
// touches no other stream.
TEST_F(AdsServiceTest, AnAcknowledgementSendsNothing) {
  Request({"web"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  const double sent = Responses("endpoint");
  const uint64_t woken = ads_->streams_woken();
  discovery::DiscoveryRequest ack;
  ack.set_type_url(kEndpointType);
  ack.add_resource_names("web");
  ack.set_version_info(response.version_info());
  ack.set_response_nonce(response.nonce());
  ASSERT_TRUE(stream_->Write(ack));
  // The acknowledgement is read before the change: otherwise the stream
  // could answer the change while it reads the acknowledgement, before
  // the fan-out runs, and the count of woken streams would lag.
  ASSERT_TRUE(::aside::testing::Eventually([this] {
    return metrics_.xds_requests.Add({{"type", "endpoint"}, {"result", "ack"}})
               .Value() >= 1;
  }));
  // Then a change: the next message is the change's, not a repeat.
  ASSERT_OK(registry_->Update(
      registry_->Find("web"),
      PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.6:80"})));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_THAT(Endpoints(response), ::testing::ElementsAre(3));
  EXPECT_EQ(Responses("endpoint") - sent, 1);
  EXPECT_EQ(WokenSince(woken, 1), 1u);
}

// A Listener name that no group answers is answered once a group takes it
// as an alias (no periodic pass needed: the alias change wakes the
// streams with Listener names).
TEST_F(AdsServiceTest, AnAliasAddedAnswersAListenerNameAtOnce) {
  Request(stream_.get(), kListenerType, {"shop.example"});
  discovery::DiscoveryResponse response;
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(response.resources_size(), 0);

  GroupSpec api = PlainGroup("api", {"10.0.0.3:80"});
  api.aliases = {"shop.example"};
  ASSERT_OK(registry_->Update(registry_->Find("api"), api));
  ASSERT_TRUE(stream_->Read(&response));
  EXPECT_EQ(ListenerCluster(response), "api");

  // And moves with it.
  api.aliases = {};
  ASSERT_OK(registry_->Update(registry_->Find("api"), api));
  GroupSpec web = PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80"});
  web.aliases = {"shop.example"};
  ASSERT_OK(registry_->Update(registry_->Find("web"), web));
  // The listener routes to "web" once the alias moved (a response without
  // it may come between).
  std::string cluster;
  for (int i = 0; i < 3 && cluster != "web"; ++i) {
    ASSERT_TRUE(stream_->Read(&response));
    cluster = ListenerCluster(response);
  }
  EXPECT_EQ(cluster, "web");
}

}  // namespace
}  // namespace aside::server::xds
