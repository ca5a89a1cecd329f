#include "tests/testing/reflection_client.h"

#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/util/json_util.h"

namespace aside::testing {

namespace pb = google::protobuf;

namespace {

constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

class CollectErrors : public pb::compiler::MultiFileErrorCollector {
 public:
  void AddError(const std::string& filename, int line, int column,
                const std::string& message) override {
    errors +=
        absl::StrCat(filename, ":", line, ":", column, ": ", message, "\n");
  }
  std::string errors;
};

}  // namespace

ReflectionClient::ReflectionClient(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)) {
  source_tree_.MapPath("", "/usr/share/grpc-proto");
  static CollectErrors errors;
  importer_ = std::make_unique<pb::compiler::Importer>(&source_tree_, &errors);
  const pb::FileDescriptor* file =
      importer_->Import("grpc/reflection/v1alpha/reflection.proto");
  if (file != nullptr) {
    request_type_ = file->FindMessageTypeByName("ServerReflectionRequest");
    response_type_ = file->FindMessageTypeByName("ServerReflectionResponse");
  }
  pool_ = std::make_unique<pb::DescriptorPool>(&database_);
  factory_ = std::make_unique<pb::DynamicMessageFactory>(pool_.get());
}

ReflectionClient::~ReflectionClient() = default;

absl::StatusOr<std::unique_ptr<pb::Message>> ReflectionClient::Roundtrip(
    const std::string& field, const std::string& value) {
  if (request_type_ == nullptr) {
    return absl::FailedPreconditionError(
        "grpc/reflection/v1alpha/reflection.proto not found");
  }
  std::unique_ptr<pb::Message> request(
      reflection_factory_.GetPrototype(request_type_)->New());
  const pb::FieldDescriptor* f = request_type_->FindFieldByName(field);
  request->GetReflection()->SetString(request.get(), f, value);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::internal::RpcMethod method(kReflectionMethod,
                                   grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream(grpc::internal::ClientReaderWriterFactory<
             grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel_.get(), method,
                                                         &context));
  if (!stream->Write(ToBuffer(request->SerializeAsString()))) {
    return absl::UnavailableError("reflection: write failed");
  }
  stream->WritesDone();
  grpc::ByteBuffer buffer;
  if (!stream->Read(&buffer)) {
    grpc::Status s = stream->Finish();
    return absl::UnavailableError(
        absl::StrCat("reflection: no response: ", s.error_message()));
  }
  std::unique_ptr<pb::Message> response(
      reflection_factory_.GetPrototype(response_type_)->New());
  if (!response->ParseFromString(FromBuffer(buffer))) {
    return absl::DataLossError("reflection: unparsable response");
  }
  grpc::ByteBuffer extra;
  while (stream->Read(&extra)) {
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("reflection: ", s.error_message()));
  }
  const pb::FieldDescriptor* error_field =
      response_type_->FindFieldByName("error_response");
  if (response->GetReflection()->HasField(*response, error_field)) {
    const pb::Message& err =
        response->GetReflection()->GetMessage(*response, error_field);
    const pb::FieldDescriptor* msg =
        err.GetDescriptor()->FindFieldByName("error_message");
    return absl::NotFoundError(
        absl::StrCat("reflection error for ", field, " '", value,
                     "': ", err.GetReflection()->GetString(err, msg)));
  }
  return response;
}

absl::StatusOr<std::vector<std::string>> ReflectionClient::ListServices() {
  absl::StatusOr<std::unique_ptr<pb::Message>> response =
      Roundtrip("list_services", "*");
  if (!response.ok()) {
    return response.status();
  }
  const pb::Message& r = **response;
  const pb::FieldDescriptor* list =
      response_type_->FindFieldByName("list_services_response");
  const pb::Message& services = r.GetReflection()->GetMessage(r, list);
  const pb::FieldDescriptor* service_field =
      services.GetDescriptor()->FindFieldByName("service");
  std::vector<std::string> names;
  const int n = services.GetReflection()->FieldSize(services, service_field);
  for (int i = 0; i < n; ++i) {
    const pb::Message& s = services.GetReflection()->GetRepeatedMessage(
        services, service_field, i);
    names.push_back(s.GetReflection()->GetString(
        s, s.GetDescriptor()->FindFieldByName("name")));
  }
  return names;
}

absl::Status ReflectionClient::AddFiles(const pb::Message& response) {
  const pb::FieldDescriptor* fdr =
      response_type_->FindFieldByName("file_descriptor_response");
  if (!response.GetReflection()->HasField(response, fdr)) {
    return absl::NotFoundError("reflection: no file_descriptor_response");
  }
  const pb::Message& files =
      response.GetReflection()->GetMessage(response, fdr);
  const pb::FieldDescriptor* protos =
      files.GetDescriptor()->FindFieldByName("file_descriptor_proto");
  const int n = files.GetReflection()->FieldSize(files, protos);
  std::vector<std::string> deps;
  for (int i = 0; i < n; ++i) {
    pb::FileDescriptorProto proto;
    if (!proto.ParseFromString(
            files.GetReflection()->GetRepeatedString(files, protos, i))) {
      return absl::DataLossError("reflection: bad FileDescriptorProto");
    }
    if (files_.insert(proto.name()).second) {
      for (const std::string& dep : proto.dependency()) {
        deps.push_back(dep);
      }
      database_.Add(proto);
    }
  }
  for (const std::string& dep : deps) {
    if (!files_.contains(dep)) {
      absl::Status s = FetchFile(dep);
      if (!s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReflectionClient::FetchFile(const std::string& filename) {
  absl::StatusOr<std::unique_ptr<pb::Message>> response =
      Roundtrip("file_by_filename", filename);
  if (!response.ok()) {
    return response.status();
  }
  return AddFiles(**response);
}

absl::Status ReflectionClient::FetchSymbol(const std::string& symbol) {
  absl::StatusOr<std::unique_ptr<pb::Message>> response =
      Roundtrip("file_containing_symbol", symbol);
  if (!response.ok()) {
    return response.status();
  }
  return AddFiles(**response);
}

absl::StatusOr<const pb::ServiceDescriptor*> ReflectionClient::DescribeService(
    const std::string& name) {
  if (const pb::ServiceDescriptor* d = pool_->FindServiceByName(name)) {
    return d;
  }
  absl::Status s = FetchSymbol(name);
  if (!s.ok()) {
    return s;
  }
  const pb::ServiceDescriptor* d = pool_->FindServiceByName(name);
  if (d == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("service ", name, " does not resolve in the pool"));
  }
  return d;
}

absl::StatusOr<const pb::Descriptor*> ReflectionClient::DescribeMessage(
    const std::string& name) {
  if (const pb::Descriptor* d = pool_->FindMessageTypeByName(name)) {
    return d;
  }
  absl::Status s = FetchSymbol(name);
  if (!s.ok()) {
    return s;
  }
  const pb::Descriptor* d = pool_->FindMessageTypeByName(name);
  if (d == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("message ", name, " does not resolve in the pool"));
  }
  return d;
}

absl::StatusOr<std::string> ReflectionClient::CallJson(
    const std::string& service, const std::string& method,
    const std::string& request_json,
    const std::multimap<std::string, std::string>& metadata) {
  absl::StatusOr<const pb::ServiceDescriptor*> sd = DescribeService(service);
  if (!sd.ok()) {
    return sd.status();
  }
  const pb::MethodDescriptor* md = (*sd)->FindMethodByName(method);
  if (md == nullptr) {
    return absl::NotFoundError(absl::StrCat("no method ", method));
  }
  std::unique_ptr<pb::Message> request(
      factory_->GetPrototype(md->input_type())->New());
  pb::util::JsonParseOptions parse_options;
  auto parsed =
      pb::util::JsonStringToMessage(request_json, request.get(), parse_options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request JSON: ", parsed.ToString()));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  for (const auto& [key, value] : metadata) {
    context.AddMetadata(key, value);
  }
  const std::string path = absl::StrCat("/", service, "/", method);
  grpc::internal::RpcMethod rpc(path.c_str(),
                                grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer response_buffer;
  grpc::Status status =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel_.get(), rpc, &context, ToBuffer(request->SerializeAsString()),
          &response_buffer);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  std::unique_ptr<pb::Message> response(
      factory_->GetPrototype(md->output_type())->New());
  if (!response->ParseFromString(FromBuffer(response_buffer))) {
    return absl::DataLossError("unparsable response");
  }
  std::string json;
  pb::util::JsonPrintOptions print_options;
  auto printed = pb::util::MessageToJsonString(*response, &json, print_options);
  if (!printed.ok()) {
    return absl::InternalError(printed.ToString());
  }
  return json;
}

std::set<std::string> ReflectionClient::files() const { return files_; }

}  // namespace aside::testing
