// Internal: what a finished probe means. Pure functions from a probe's
// outcome (a TCP connect result, an HTTP response status or read error, a
// grpc.health.v1 response or call status) to a ProbeResult: healthy or not,
// and the reason shown to operators. No sockets, no clocks: the prober's
// glue (prober.cc) gathers the outcome and asks here for the verdict.
//
// Thread-safety: every function is pure and may be called from any thread.
#ifndef ASIDE_SERVER_HEALTH_PROBE_VERDICT_H_
#define ASIDE_SERVER_HEALTH_PROBE_VERDICT_H_

#include <grpcpp/support/status.h>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "server/health/health_registry.h"
#include "server/schema/group_spec.h"

namespace aside::server::health_internal {

// Largest HTTP response header accepted from a backend.
inline constexpr uint32_t kHttpHeaderLimit = 16 * 1024;
// Largest gRPC health response accepted from a backend.
inline constexpr int kGrpcMaxResponseBytes = 4 * 1024;
// Backend-provided text kept in a reason.
inline constexpr size_t kMaxReasonDetail = 200;

ProbeResult ProbeSuccess(std::string warning = {});
ProbeResult ProbeFailure(std::string reason);

// Backend-provided text as it may appear in a reason: at most
// kMaxReasonDetail bytes ("..." when cut), control characters blanked.
std::string ReasonDetail(absl::string_view text);

// A socket probe (tcp or http) that ended with `ec` in step `what`
// ("connect", "write", "read"). When the probe's timer fired first
// (`timed_out`), the reason names the timeout and the `phase` it was in.
ProbeResult SocketFailureVerdict(const boost::system::error_code& ec,
                                 absl::string_view what, bool timed_out,
                                 absl::string_view phase,
                                 absl::Duration timeout);

// An HTTP response whose header was read: healthy when `status` is in one
// of `expected` (inclusive ranges).
ProbeResult HttpStatusVerdict(unsigned status,
                              const std::vector<StatusRange>& expected);

// An HTTP response that could not be read (`ec` from Beast's parser or the
// socket), with the spec's body limit for the message.
ProbeResult HttpReadErrorVerdict(const boost::system::error_code& ec,
                                 uint32_t body_limit);

// The verdict of a finished grpc.health.v1 Check call (DESIGN.md §3, the
// gRPC health-checking protocol): only SERVING is healthy; UNIMPLEMENTED
// means the backend has no health service and counts as healthy with a
// warning.
ProbeResult GrpcVerdict(const grpc::Status& status,
                        const grpc::health::v1::HealthCheckResponse& response,
                        absl::Duration timeout);

// The bytes of the HTTP probe's request: "GET <path> HTTP/1.1" with Host
// (spec.http_host, else the address probed), User-Agent, Accept and
// "Connection: close", and no body.
std::string HttpProbeRequest(const HealthCheckSpec& spec,
                             absl::string_view host, uint16_t port, bool ipv6);

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_PROBE_VERDICT_H_
