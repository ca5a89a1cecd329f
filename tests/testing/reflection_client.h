// A server-reflection client that resolves services and messages the way
// grpcurl does (grpc.reflection.v1alpha: list_services, then
// file_containing_symbol and file_by_filename for every dependency, into a
// descriptor pool), and calls unary methods with JSON, so tests can check
// that everything an operator does with grpcurl works without .proto files.
#ifndef ASIDE_TESTS_TESTING_REFLECTION_CLIENT_H_
#define ASIDE_TESTS_TESTING_REFLECTION_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/compiler/importer.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor_database.h"
#include "google/protobuf/dynamic_message.h"

namespace aside::testing {

class ReflectionClient {
 public:
  explicit ReflectionClient(std::shared_ptr<grpc::Channel> channel);
  ~ReflectionClient();

  // list: the services the server reports.
  absl::StatusOr<std::vector<std::string>> ListServices();

  // describe SYMBOL: fetches the file defining `symbol` and, transitively,
  // its dependencies, then returns the service or message descriptor found
  // in the resulting pool (never from the compiled-in pool).
  absl::StatusOr<const google::protobuf::ServiceDescriptor*> DescribeService(
      const std::string& name);
  absl::StatusOr<const google::protobuf::Descriptor*> DescribeMessage(
      const std::string& name);

  // grpcurl -d JSON SERVICE/METHOD for a unary method; returns the response
  // as JSON, or the RPC's status as an error.
  absl::StatusOr<std::string> CallJson(
      const std::string& service, const std::string& method,
      const std::string& request_json,
      const std::multimap<std::string, std::string>& metadata = {});

  // Every file fetched so far.
  std::set<std::string> files() const;

 private:
  absl::Status FetchSymbol(const std::string& symbol);
  absl::Status FetchFile(const std::string& filename);
  absl::Status AddFiles(const google::protobuf::Message& response);
  absl::StatusOr<std::unique_ptr<google::protobuf::Message>> Roundtrip(
      const std::string& field, const std::string& value);

  std::shared_ptr<grpc::Channel> channel_;
  // The reflection protocol's own messages, from Debian's reflection.proto.
  google::protobuf::compiler::DiskSourceTree source_tree_;
  std::unique_ptr<google::protobuf::compiler::Importer> importer_;
  google::protobuf::DynamicMessageFactory reflection_factory_;
  const google::protobuf::Descriptor* request_type_ = nullptr;
  const google::protobuf::Descriptor* response_type_ = nullptr;

  // What the server sent.
  google::protobuf::SimpleDescriptorDatabase database_;
  std::unique_ptr<google::protobuf::DescriptorPool> pool_;
  std::unique_ptr<google::protobuf::DynamicMessageFactory> factory_;
  std::set<std::string> files_;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_REFLECTION_CLIENT_H_
