// Health-probe responses as a backend sends them (server/health/): the
// first byte picks the probe kind.
//   http: the rest is the bytes on the connection, read by the prober's own
//         parser (header limit, a body limit from the next two bytes) and
//         judged by HttpStatusVerdict / HttpReadErrorVerdict;
//   grpc: the next byte is the call's status code (0..31: known codes and
//         ones gRPC does not know), then a length byte and the status
//         message, then a serialized HealthCheckResponse, judged by
//         GrpcVerdict.
// Whatever the bytes: healthy only for what the spec says is healthy, and
// the reason an operator reads is bounded and free of control characters.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/health/discard_body.h"
#include "server/health/probe_verdict.h"

namespace {

namespace http = boost::beast::http;
using aside::server::ProbeResult;
using namespace aside::server::health_internal;

void CheckReason(const ProbeResult& r) {
  if (r.reason.size() > 2 * kMaxReasonDetail + 200) {
    __builtin_trap();
  }
  for (const char c : r.reason) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      __builtin_trap();
    }
  }
}

void Http(const uint8_t* data, size_t size) {
  if (size < 2) {
    return;
  }
  const uint32_t body_limit = (uint32_t{data[0]} << 8 | data[1]) + 1;
  data += 2;
  size -= 2;
  const std::vector<aside::server::StatusRange> expected = {{200, 299},
                                                            {304, 304}};
  http::response_parser<DiscardBody> parser;
  parser.header_limit(kHttpHeaderLimit);
  parser.body_limit(body_limit);
  parser.eager(true);
  boost::system::error_code ec;
  size_t used = 0;
  while (used < size && !ec && !parser.is_done()) {
    const size_t n =
        parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) {
      ec = {};
      break;
    }
    if (n == 0) {
      break;
    }
    used += n;
  }
  if (!ec && !parser.is_done()) {
    parser.put_eof(ec);
  }
  ProbeResult r;
  if (ec) {
    r = HttpReadErrorVerdict(ec, body_limit);
    if (r.success) {
      __builtin_trap();
    }
  } else if (parser.is_done()) {
    const unsigned status = parser.get().result_int();
    r = HttpStatusVerdict(status, expected);
    const bool wanted = (status >= 200 && status <= 299) || status == 304;
    if (r.success != wanted) {
      __builtin_trap();
    }
  }
  CheckReason(r);
}

void Grpc(const uint8_t* data, size_t size) {
  if (size < 2) {
    return;
  }
  // The wire's grpc-status is any number; grpc::StatusCode (an enum
  // without a fixed type, enumerators 0..16) holds 0..31 without UB.
  const auto code = static_cast<grpc::StatusCode>(data[0] % 32);
  const size_t message_size = std::min<size_t>(data[1], size - 2);
  const std::string message(reinterpret_cast<const char*>(data + 2),
                            message_size);
  grpc::health::v1::HealthCheckResponse response;
  const bool parsed = response.ParseFromArray(
      data + 2 + message_size, static_cast<int>(size - 2 - message_size));
  const grpc::Status status = code == grpc::StatusCode::OK
                                  ? grpc::Status::OK
                                  : grpc::Status(code, message);
  if (status.ok() && !parsed) {
    return;  // gRPC itself fails such a call before the verdict
  }
  const ProbeResult r = GrpcVerdict(status, response, absl::Seconds(1));
  const bool wanted =
      status.ok()
          ? response.status() == grpc::health::v1::HealthCheckResponse::SERVING
          : code == grpc::StatusCode::UNIMPLEMENTED;
  if (r.success != wanted) {
    __builtin_trap();
  }
  CheckReason(r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) {
    return 0;
  }
  if (data[0] % 2 == 0) {
    Http(data + 1, size - 1);
  } else {
    Grpc(data + 1, size - 1);
  }
  return 0;
}
