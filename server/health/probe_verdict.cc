#include "server/health/probe_verdict.h"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/beast/http/write.hpp>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace aside::server::health_internal {
namespace {

namespace http = boost::beast::http;
using grpc::health::v1::HealthCheckResponse;

std::string Lower(std::string text) {
  absl::AsciiStrToLower(&text);
  return text;
}

// gRPC and absl share their status code values; absl names them the same
// way ("UNAVAILABLE").
std::string GrpcCodeName(grpc::StatusCode code) {
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  if (name.empty()) {
    return absl::StrCat("code ", static_cast<int>(code));
  }
  return name;
}

}  // namespace

ProbeResult ProbeSuccess(std::string warning) {
  ProbeResult r;
  r.success = true;
  r.reason = std::move(warning);
  return r;
}

ProbeResult ProbeFailure(std::string reason) {
  ProbeResult r;
  r.success = false;
  r.reason = std::move(reason);
  return r;
}

std::string ReasonDetail(absl::string_view text) {
  std::string out(text.substr(0, kMaxReasonDetail));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = ' ';
    }
  }
  if (text.size() > kMaxReasonDetail) {
    out += "...";
  }
  return out;
}

ProbeResult SocketFailureVerdict(const boost::system::error_code& ec,
                                 absl::string_view what, bool timed_out,
                                 absl::string_view phase,
                                 absl::Duration timeout) {
  if (timed_out) {
    return ProbeFailure(absl::StrCat(
        "timeout after ", absl::FormatDuration(timeout), " (", phase, ")"));
  }
  return ProbeFailure(absl::StrCat(what, ": ", Lower(ec.message())));
}

ProbeResult HttpStatusVerdict(unsigned status,
                              const std::vector<StatusRange>& expected) {
  if (status < 100 || status > 599) {
    return ProbeFailure(absl::StrCat("http status ", status, " out of range"));
  }
  for (const StatusRange& range : expected) {
    if (status >= range.from && status <= range.to) {
      return ProbeSuccess();
    }
  }
  return ProbeFailure(absl::StrCat("http status ", status));
}

ProbeResult HttpReadErrorVerdict(const boost::system::error_code& ec,
                                 uint32_t body_limit) {
  if (ec == http::error::body_limit) {
    return ProbeFailure(
        absl::StrCat("http body exceeds ", body_limit, " bytes"));
  }
  if (ec == http::error::header_limit) {
    return ProbeFailure(absl::StrCat("http response header exceeds ",
                                     kHttpHeaderLimit, " bytes"));
  }
  if (ec == http::error::end_of_stream) {
    return ProbeFailure("http connection closed before a response");
  }
  if (ec == http::error::partial_message) {
    return ProbeFailure("http response truncated (connection closed)");
  }
  if (ec.category() ==
      http::make_error_code(http::error::bad_status).category()) {
    return ProbeFailure(
        absl::StrCat("http malformed response: ", Lower(ec.message())));
  }
  return ProbeFailure(absl::StrCat("read: ", Lower(ec.message())));
}

ProbeResult GrpcVerdict(const grpc::Status& status,
                        const HealthCheckResponse& response,
                        absl::Duration timeout) {
  if (status.ok()) {
    const int value = static_cast<int>(response.status());
    switch (value) {
      case HealthCheckResponse::SERVING:
        return ProbeSuccess();
      case HealthCheckResponse::NOT_SERVING:
        return ProbeFailure("grpc status NOT_SERVING");
      case HealthCheckResponse::SERVICE_UNKNOWN:
        return ProbeFailure("grpc status SERVICE_UNKNOWN");
      case HealthCheckResponse::UNKNOWN:
        return ProbeFailure("grpc status UNKNOWN");
      default:
        return ProbeFailure(absl::StrCat("grpc status ", value,
                                         " (not a known serving status)"));
    }
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNIMPLEMENTED:
      return ProbeSuccess(
          "warning: the backend does not implement grpc.health.v1.Health "
          "(UNIMPLEMENTED); counted as healthy");
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return ProbeFailure(absl::StrCat("timeout after ",
                                       absl::FormatDuration(timeout),
                                       " (grpc DEADLINE_EXCEEDED)"));
    default:
      return ProbeFailure(absl::StrCat("grpc ",
                                       GrpcCodeName(status.error_code()), ": ",
                                       ReasonDetail(status.error_message())));
  }
}

std::string HttpProbeRequest(const HealthCheckSpec& spec,
                             absl::string_view host, uint16_t port, bool ipv6) {
  std::string host_field = spec.http_host;
  if (host_field.empty()) {
    host_field = ipv6 ? absl::StrCat("[", host, "]:", port)
                      : absl::StrCat(host, ":", port);
  }
  http::request<http::empty_body> request(http::verb::get, spec.http_path, 11);
  request.set(http::field::host, host_field);
  request.set(http::field::user_agent, "aside-health");
  request.set(http::field::accept, "*/*");
  request.set(http::field::connection, "close");
  std::ostringstream out;
  out << request;
  return std::move(out).str();
}

}  // namespace aside::server::health_internal
