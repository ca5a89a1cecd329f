// TLS settings shared by the stub, the ChannelPool and asidectl.
#ifndef ASIDE_CLIENT_CREDENTIALS_H_
#define ASIDE_CLIENT_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace aside {

struct TlsOptions {
  // Off: plaintext. On with every file empty: TLS with the system roots.
  bool enabled = false;
  // PEM file of the CA that signed the server certificate (empty: system
  // roots).
  std::string ca_file;
  // Client certificate and key (PEM) for mTLS; both or neither.
  std::string cert_file;
  std::string key_file;
  // Name to verify the server certificate against instead of the target's
  // host (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG).
  std::string server_name;
  // How often the files are read again (gRPC's file watcher), so that a
  // renewed CA bundle, certificate or key is used for new connections
  // without a restart; rounded up to whole seconds. Zero: read once.
  // Established connections keep the handshake they made.
  absl::Duration reload_interval = absl::Seconds(10);
};

// Reads the files (errors name the file) and returns the credentials; with
// a reload_interval they keep following the files.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const TlsOptions& tls);

// Adds what `tls` needs to channel arguments (the server name override).
void ApplyTlsArgs(const TlsOptions& tls, grpc::ChannelArguments* args);

}  // namespace aside

#endif  // ASIDE_CLIENT_CREDENTIALS_H_
