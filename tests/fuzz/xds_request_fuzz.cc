// xDS DiscoveryRequests as a stock gRPC client (or anyone who reaches the
// port) sends them on an ADS stream (server/api/xds/ads_service.h), against
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
#include "server/api/xds/xds_resources.h"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    auto context = aside::fuzz::FuzzContext();
    auto stream = Stub().StreamAggregatedResources(context.get());
    aside::fuzz::SendFuzzedRequests<DiscoveryRequest, DiscoveryResponse>(
        *stream, data, size);
  }
  auto context = aside::fuzz::FuzzContext();
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
