// gRPC C++ 1.51's per-call ORCA reports on a test backend. The library
// (libgrpc++ 1.51, as Debian packages it) holds the recorder a handler
// fills (ServerContext::ExperimentalGetCallMetricRecorder(), the stock
// grpc::experimental::CallMetricRecorder) and its serialisation, but not
// the server interceptor that creates the recorder for each call and sends
// its report as the `endpoint-load-metrics-bin` trailer (upstream's
// separate grpcpp_orca_service library, which Debian does not ship, with
// EnableCallMetricRecording). This supplies that interceptor, under the
// name the gRPC headers grant access to, so that a handler uses the stock
// recorder API unchanged and the trailer on the wire is the library's own
// serialisation.
#ifndef ASIDE_TESTS_TESTING_CALL_METRIC_RECORDING_H_
#define ASIDE_TESTS_TESTING_CALL_METRIC_RECORDING_H_

#include <grpcpp/server_builder.h>

namespace aside::testing {

// gRPC's C core keeps a call's `endpoint-load-metrics-bin` trailer for
// client-side load-balancing policies and never shows it to the
// application, so a C++ caller cannot read it; a backend that serves
// per-call reports to C++ callers also sends the same bytes under a name
// the core passes through, this one.
inline constexpr char kMirroredReportKey[] = "orca-load-report-bin";

// What grpc::experimental::EnableCallMetricRecording does in the libraries
// that have it: every call of servers built by `builder` gets a recorder,
// whose report (when the handler recorded anything) goes out in the call's
// trailing metadata, as `endpoint-load-metrics-bin` and kMirroredReportKey.
void EnableCallMetricRecording(grpc::ServerBuilder* builder);

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_CALL_METRIC_RECORDING_H_
