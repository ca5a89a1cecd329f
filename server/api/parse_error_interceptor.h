// Unary requests whose bytes do not parse as the method's request message.
//
// gRPC's callback API answers such a call with UNIMPLEMENTED and an empty
// message, as if the method did not exist. This interceptor (installed on
// the server's unary methods only: streaming calls parse their own
// requests, or see a bad message as the end of the stream) turns that
// answer into INVALID_ARGUMENT naming the message type, e.g.
//   request: the bytes do not parse as aside.v1.PickRequest
// Calls that parse are only passed through.
#ifndef ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_
#define ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace aside::server {

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_PARSE_ERROR_INTERCEPTOR_H_
