#include "tests/testing/call_metric_recording.h"

#include <grpcpp/ext/call_metric_recorder.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/types/optional.h"

namespace grpc::experimental {

using ::aside::testing::kMirroredReportKey;

// The name ServerContextBase and CallMetricRecorder befriend.
class OrcaServerInterceptor : public Interceptor {
 public:
  explicit OrcaServerInterceptor(ServerRpcInfo* info) : info_(info) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      info_->server_context()->CreateCallMetricRecorder();
    } else if (methods->QueryInterceptionHookPoint(
                   InterceptionHookPoints::PRE_SEND_STATUS)) {
      CallMetricRecorder* recorder =
          info_->server_context()->call_metric_recorder_;
      if (recorder != nullptr) {
        absl::optional<std::string> report = recorder->CreateSerializedReport();
        if (report.has_value() && !report->empty()) {
          methods->GetSendTrailingMetadata()->emplace(kMirroredReportKey,
                                                      *report);
          methods->GetSendTrailingMetadata()->emplace(
              "endpoint-load-metrics-bin", std::move(*report));
        }
      }
    }
    methods->Proceed();
  }

 private:
  ServerRpcInfo* const info_;
};

}  // namespace grpc::experimental

namespace aside::testing {
namespace {

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new grpc::experimental::OrcaServerInterceptor(info);
  }
};

}  // namespace

void EnableCallMetricRecording(grpc::ServerBuilder* builder) {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      factories;
  factories.push_back(std::make_unique<Factory>());
  builder->experimental().SetInterceptorCreators(std::move(factories));
}

}  // namespace aside::testing
