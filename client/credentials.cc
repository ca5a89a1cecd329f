#include "client/credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
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

// TLS credentials whose CA bundle and client certificate come from gRPC's
// file watcher, re-read every `tls.reload_interval`. Without a CA file the
// system roots verify the server, as with SslCredentials.
std::shared_ptr<grpc::ChannelCredentials> WatchingCredentials(
    const TlsOptions& tls) {
  const auto refresh = static_cast<unsigned int>(std::max<int64_t>(
      1,
      absl::ToInt64Seconds(absl::Ceil(tls.reload_interval, absl::Seconds(1)))));
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (tls.cert_file.empty()) {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            tls.ca_file, refresh);
  } else if (tls.ca_file.empty()) {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            tls.key_file, tls.cert_file, refresh);
  } else {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            tls.key_file, tls.cert_file, tls.ca_file, refresh);
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  if (!tls.ca_file.empty()) {
    options.watch_root_certs();
  }
  if (!tls.cert_file.empty()) {
    options.watch_identity_key_cert_pairs();
  }
  // The chain against the roots, and the name against the target (or
  // server_name), as SslCredentials does.
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
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
  if (tls.ca_file.empty() && tls.cert_file.empty()) {
    // The system roots only: nothing to follow.
    return grpc::SslCredentials(grpc::SslCredentialsOptions());
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
  // The files were readable now; from here on the watcher follows them.
  if (tls.reload_interval > absl::ZeroDuration()) {
    return WatchingCredentials(tls);
  }
  return grpc::SslCredentials(ssl);
}

void ApplyTlsArgs(const TlsOptions& tls, grpc::ChannelArguments* args) {
  if (tls.enabled && !tls.server_name.empty()) {
    args->SetSslTargetNameOverride(tls.server_name);
  }
}

}  // namespace aside
