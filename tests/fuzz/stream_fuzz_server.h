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

}  // namespace aside::fuzz

#endif  // ASIDE_TESTS_FUZZ_STREAM_FUZZ_SERVER_H_
