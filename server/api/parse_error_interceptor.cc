#include "server/api/parse_error_interceptor.h"

#include <google/protobuf/descriptor.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace aside::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "/aside.v1.LoadBalancer/Pick" -> "aside.v1.PickRequest" (the method's
// input type), or "the request message" when the pool does not know it.
std::string RequestTypeOf(const char* method) {
  std::string name = method != nullptr ? method : "";
  if (!name.empty() && name.front() == '/') {
    name.erase(0, 1);
  }
  absl::StrReplaceAll({{"/", "."}}, &name);
  const google::protobuf::MethodDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
          name);
  return d != nullptr ? d->input_type()->full_name() : "the request message";
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  // A call's interceptor lives as long as the call.
  ParseErrorInterceptor(grpc::experimental::ServerRpcInfo* info,
                        CallsInFlight* calls)
      : info_(info), calls_(calls) {
    if (calls_ != nullptr) {
      calls_->Begin(/*unary=*/true);
    }
  }
  ~ParseErrorInterceptor() override {
    if (calls_ != nullptr) {
      calls_->End(/*unary=*/true);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    // A unary call receives exactly one message; none after the request
    // was read means it did not parse (or carried no payload).
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(
                         InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("request: the bytes do not parse as ",
                                    RequestTypeOf(info_->method()))));
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  CallsInFlight* const calls_;
  bool unparsed_ = false;
};

// A stream's: counts it, and passes everything on.
class StreamCounter final : public grpc::experimental::Interceptor {
 public:
  explicit StreamCounter(CallsInFlight* calls) : calls_(calls) {
    calls_->Begin(/*unary=*/false);
  }
  ~StreamCounter() override { calls_->End(/*unary=*/false); }
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  CallsInFlight* const calls_;
};

}  // namespace

grpc::experimental::Interceptor*
ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) {
    // Nothing to check on streams; only counted.
    return calls_ != nullptr ? new StreamCounter(calls_) : nullptr;
  }
  return new ParseErrorInterceptor(info, calls_);
}

}  // namespace aside::server
