// For the request fuzz targets (xds_request_fuzz, grpclb_request_fuzz,
// pick_request_fuzz): one in-process gRPC server on loopback, kept for the
// life of the process, with the real ADS, grpclb and aside.v1.LoadBalancer
// services over a registry holding group "web" (alias
// web.example.internal, three backends), and a reader of the
// length-delimited messages an input is made of.
#ifndef ASIDE_TESTS_FUZZ_STREAM_FUZZ_SERVER_H_
#define ASIDE_TESTS_FUZZ_STREAM_FUZZ_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace aside::fuzz {

// A channel to the server (started on first use).
std::shared_ptr<grpc::Channel> StreamFuzzChannel();

// Splits `data` into at most `max` messages, each a varint length and that
// many bytes (a short last one is cut to what is there).
std::vector<std::string> SplitMessages(const uint8_t* data, size_t size,
                                       size_t max);

// A client context with a 5 s deadline.
std::unique_ptr<grpc::ClientContext> FuzzContext();

// Writes the requests `data` holds (up to 16; bytes that do not parse as a
// Request are skipped) on a bidirectional `stream`, half-closes, reads and
// drops what comes back, and traps when the service never ended the
// half-closed stream (its deadline passed instead).
template <typename Request, typename Response, typename Stream>
void SendFuzzedRequests(Stream& stream, const uint8_t* data, size_t size) {
  for (const std::string& bytes : SplitMessages(data, size, 16)) {
    Request request;
    if (request.ParseFromString(bytes) && !stream.Write(request)) {
      break;
    }
  }
  stream.WritesDone();
  Response response;
  while (stream.Read(&response)) {
  }
  if (stream.Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    __builtin_trap();
  }
}

}  // namespace aside::fuzz

#endif  // ASIDE_TESTS_FUZZ_STREAM_FUZZ_SERVER_H_
