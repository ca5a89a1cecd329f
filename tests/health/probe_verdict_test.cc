// Probe verdicts as pure functions: no sockets, no backends.
#include "server/health/probe_verdict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>
#include <string>

namespace aside::server::health_internal {
namespace {

namespace http = boost::beast::http;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

TEST(ProbeVerdictTest, HttpStatusInAnExpectedRangeIsHealthy) {
  const std::vector<StatusRange> standard = {{200, 399}};
  EXPECT_TRUE(HttpStatusVerdict(200, standard).success);
  EXPECT_TRUE(HttpStatusVerdict(399, standard).success);
  EXPECT_EQ(HttpStatusVerdict(200, standard).reason, "");
  const ProbeResult bad = HttpStatusVerdict(503, standard);
  EXPECT_FALSE(bad.success);
  EXPECT_EQ(bad.reason, "http status 503");
  // Several ranges.
  const std::vector<StatusRange> two = {{200, 200}, {418, 418}};
  EXPECT_TRUE(HttpStatusVerdict(418, two).success);
  EXPECT_EQ(HttpStatusVerdict(204, two).reason, "http status 204");
  // Outside what HTTP allows, whatever the ranges say.
  const std::vector<StatusRange> all = {{0, 1000}};
  EXPECT_EQ(HttpStatusVerdict(999, all).reason, "http status 999 out of range");
  EXPECT_EQ(HttpStatusVerdict(99, all).reason, "http status 99 out of range");
}

TEST(ProbeVerdictTest, HttpReadErrorsNameWhatWentWrong) {
  EXPECT_EQ(HttpReadErrorVerdict(http::error::body_limit, 1024).reason,
            "http body exceeds 1024 bytes");
  EXPECT_EQ(HttpReadErrorVerdict(http::error::header_limit, 1024).reason,
            "http response header exceeds 16384 bytes");
  EXPECT_EQ(HttpReadErrorVerdict(http::error::end_of_stream, 1024).reason,
            "http connection closed before a response");
  EXPECT_EQ(HttpReadErrorVerdict(http::error::partial_message, 1024).reason,
            "http response truncated (connection closed)");
  EXPECT_THAT(HttpReadErrorVerdict(http::error::bad_version, 1024).reason,
              HasSubstr("http malformed response: "));
  const ProbeResult reset =
      HttpReadErrorVerdict(boost::asio::error::connection_reset, 1024);
  EXPECT_FALSE(reset.success);
  EXPECT_THAT(reset.reason, HasSubstr("read: connection reset"));
}

TEST(ProbeVerdictTest, SocketFailuresNameTheStepOrTheTimeout) {
  const ProbeResult refused =
      SocketFailureVerdict(boost::asio::error::connection_refused, "connect",
                           false, "", absl::Seconds(1));
  EXPECT_FALSE(refused.success);
  EXPECT_EQ(refused.reason, "connect: connection refused");
  const ProbeResult late =
      SocketFailureVerdict(boost::asio::error::operation_aborted, "read", true,
                           "waiting for the response", absl::Milliseconds(250));
  EXPECT_EQ(late.reason, "timeout after 250ms (waiting for the response)");
}

TEST(ProbeVerdictTest, GrpcOnlyServingIsHealthy) {
  HealthCheckResponse response;
  response.set_status(HealthCheckResponse::SERVING);
  EXPECT_TRUE(
      GrpcVerdict(grpc::Status::OK, response, absl::Seconds(1)).success);
  response.set_status(HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(GrpcVerdict(grpc::Status::OK, response, absl::Seconds(1)).reason,
            "grpc status NOT_SERVING");
  response.set_status(HealthCheckResponse::SERVICE_UNKNOWN);
  EXPECT_EQ(GrpcVerdict(grpc::Status::OK, response, absl::Seconds(1)).reason,
            "grpc status SERVICE_UNKNOWN");
  response.set_status(HealthCheckResponse::UNKNOWN);
  EXPECT_EQ(GrpcVerdict(grpc::Status::OK, response, absl::Seconds(1)).reason,
            "grpc status UNKNOWN");
  response.set_status(static_cast<HealthCheckResponse::ServingStatus>(42));
  EXPECT_EQ(GrpcVerdict(grpc::Status::OK, response, absl::Seconds(1)).reason,
            "grpc status 42 (not a known serving status)");
}

TEST(ProbeVerdictTest, GrpcCallErrors) {
  const HealthCheckResponse none;
  const ProbeResult unimplemented =
      GrpcVerdict(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""), none,
                  absl::Seconds(1));
  EXPECT_TRUE(unimplemented.success);
  EXPECT_THAT(unimplemented.reason, HasSubstr("warning: "));
  EXPECT_EQ(GrpcVerdict(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x"),
                        none, absl::Milliseconds(300))
                .reason,
            "timeout after 300ms (grpc DEADLINE_EXCEEDED)");
  EXPECT_EQ(
      GrpcVerdict(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"),
                  none, absl::Seconds(1))
          .reason,
      "grpc NOT_FOUND: unknown service");
  EXPECT_EQ(GrpcVerdict(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"),
                        none, absl::Seconds(1))
                .reason,
            "grpc UNAVAILABLE: down");
  EXPECT_EQ(GrpcVerdict(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, ""),
                        none, absl::Seconds(1))
                .reason,
            "grpc PERMISSION_DENIED: ");
}

TEST(ProbeVerdictTest, BackendTextInReasonsIsCutAndCleaned) {
  const std::string message = "line1\r\nline2\x7f" + std::string(300, 'x');
  const ProbeResult r =
      GrpcVerdict(grpc::Status(grpc::StatusCode::INTERNAL, message),
                  HealthCheckResponse(), absl::Seconds(1));
  EXPECT_EQ(r.reason.substr(0, 28), "grpc INTERNAL: line1  line2 ");
  EXPECT_EQ(r.reason.size(),
            std::string("grpc INTERNAL: ").size() + kMaxReasonDetail + 3);
  EXPECT_EQ(r.reason.substr(r.reason.size() - 3), "...");
  EXPECT_EQ(ReasonDetail("short"), "short");
}

TEST(ProbeVerdictTest, HttpRequestIsTheSameBytesAsEver) {
  HealthCheckSpec spec;
  spec.kind = HealthCheckSpec::Kind::kHttp;
  spec.http_path = "/healthz?deep=1";
  EXPECT_EQ(HttpProbeRequest(spec, "127.0.0.1", 8080, false),
            "GET /healthz?deep=1 HTTP/1.1\r\n"
            "Host: 127.0.0.1:8080\r\n"
            "User-Agent: aside-health\r\n"
            "Accept: */*\r\n"
            "Connection: close\r\n"
            "\r\n");
  EXPECT_EQ(HttpProbeRequest(spec, "::1", 80, true),
            "GET /healthz?deep=1 HTTP/1.1\r\n"
            "Host: [::1]:80\r\n"
            "User-Agent: aside-health\r\n"
            "Accept: */*\r\n"
            "Connection: close\r\n"
            "\r\n");
  spec.http_host = "payments.internal";
  spec.http_path = "/";
  EXPECT_EQ(HttpProbeRequest(spec, "10.0.0.1", 80, false),
            "GET / HTTP/1.1\r\n"
            "Host: payments.internal\r\n"
            "User-Agent: aside-health\r\n"
            "Accept: */*\r\n"
            "Connection: close\r\n"
            "\r\n");
}

}  // namespace
}  // namespace aside::server::health_internal
