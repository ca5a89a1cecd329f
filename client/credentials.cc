#include "client/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace aside {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& what,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot read '", path, "'"));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled) {
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: a client certificate needs both cert_file and key_file");
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("tls.ca_file", tls.ca_file);
    if (!ca.ok()) {
      return ca.status();
    }
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile("tls.cert_file", tls.cert_file);
    if (!cert.ok()) {
      return cert.status();
    }
    absl::StatusOr<std::string> key = ReadFile("tls.key_file", tls.key_file);
    if (!key.ok()) {
      return key.status();
    }
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

void ApplyTlsArgs(const TlsOptions& tls, grpc::ChannelArguments* args) {
  if (tls.enabled && !tls.server_name.empty()) {
    args->SetSslTargetNameOverride(tls.server_name);
  }
}

}  // namespace aside
