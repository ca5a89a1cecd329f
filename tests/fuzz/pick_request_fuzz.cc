// Pick requests as any client sends them (server/api/load_balancer_service.h),
// against the real service in process: each input is up to 16
// length-delimited messages; each that parses as an aside.v1.PickRequest
// is sent as one Pick (any group name, key, key bytes, session token,
// excludes, locality and count). Every answer is OK with 1..count distinct
// backends of the group, or a refusal (INVALID_ARGUMENT, NOT_FOUND,
// UNAVAILABLE) with a message; and a well-formed Pick still succeeds after.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>

#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/fuzz/stream_fuzz_server.h"

namespace {

aside::v1::LoadBalancer::Stub& Stub() {
  static auto* stub =
      aside::v1::LoadBalancer::NewStub(aside::fuzz::StreamFuzzChannel())
          .release();
  return *stub;
}

grpc::Status Pick(const aside::v1::PickRequest& request,
                  aside::v1::PickResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  return Stub().Pick(&context, request, response);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const std::string& bytes : aside::fuzz::SplitMessages(data, size, 16)) {
    aside::v1::PickRequest request;
    if (!request.ParseFromString(bytes)) {
      continue;
    }
    aside::v1::PickResponse response;
    const grpc::Status s = Pick(request, &response);
    switch (s.error_code()) {
      case grpc::StatusCode::OK: {
        const int wanted = std::max<int>(1, static_cast<int>(request.count()));
        std::set<std::string> distinct;
        for (const auto& b : response.backends()) {
          distinct.insert(b.address());
        }
        if (response.backends_size() < 1 || response.backends_size() > wanted ||
            static_cast<int>(distinct.size()) != response.backends_size()) {
          __builtin_trap();
        }
        break;
      }
      case grpc::StatusCode::INVALID_ARGUMENT:
      case grpc::StatusCode::NOT_FOUND:
      case grpc::StatusCode::UNAVAILABLE:
        if (s.error_message().empty()) {
          __builtin_trap();  // a refusal must say why
        }
        break;
      default:
        __builtin_trap();
    }
  }
  aside::v1::PickRequest good;
  good.set_group("web");
  aside::v1::PickResponse response;
  if (!Pick(good, &response).ok()) {
    __builtin_trap();  // the service stopped serving
  }
  return 0;
}
