// xDS DiscoveryRequests as a stock gRPC client (or anyone who reaches the
// port) sends them on an ADS stream (server/xds/ads_service.h), against
// the real service in process: each input is up to 16 length-delimited
// messages; each one that parses as a DiscoveryRequest is sent on one
// stream, whatever its type URL, names, nonce, version or error detail.
// The stream must end or answer within its deadline, and afterwards a
// fresh stream asking for Listener "web" must get it: the service keeps
// serving.
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "server/xds/xds_resources.h"
#include "tests/fuzz/stream_fuzz_server.h"

namespace {

using envoy::service::discovery::v3::AggregatedDiscoveryService;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;

AggregatedDiscoveryService::Stub& Stub() {
  static auto* stub =
      AggregatedDiscoveryService::NewStub(aside::fuzz::StreamFuzzChannel())
          .release();
  return *stub;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    auto context = Context();
    auto stream = Stub().StreamAggregatedResources(context.get());
    for (const std::string& bytes :
         aside::fuzz::SplitMessages(data, size, 16)) {
      DiscoveryRequest request;
      if (request.ParseFromString(bytes) && !stream->Write(request)) {
        break;
      }
    }
    stream->WritesDone();
    // The service ends the stream once it has handled every request before
    // the half-close; what it answered is read and dropped.
    DiscoveryResponse response;
    while (stream->Read(&response)) {
    }
    if (stream->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      __builtin_trap();  // the service did not end a half-closed stream
    }
  }
  auto context = Context();
  auto stream = Stub().StreamAggregatedResources(context.get());
  DiscoveryRequest request;
  request.set_type_url(aside::server::xds::kListenerType);
  request.add_resource_names("web");
  request.mutable_node()->set_id("fuzz");
  DiscoveryResponse response;
  if (!stream->Write(request) || !stream->Read(&response) ||
      response.resources_size() != 1) {
    __builtin_trap();  // the service stopped serving
  }
  context->TryCancel();
  (void)stream->Finish();
  return 0;
}
