// The bootstrap a stock gRPC client needs to use Aside as its xDS
// management server (GRPC_XDS_BOOTSTRAP names a file holding it, or
// GRPC_XDS_BOOTSTRAP_CONFIG holds it). It lists `ignore_resource_deletion`
// so that clients keep their last configuration when a restarted server
// answers before it has loaded its groups, instead of dropping everything.
//
// Which clients accept it. The node always carries a `locality` object
// (empty fields by default): grpc-js-xds 1.14 refuses a node without one
// ("locality field missing in node element"), while gRPC C-core (1.51 and
// current), Go and Java treat it as optional, so every family accepts it.
// Channel credentials are listed in order of preference and each client
// uses the first type it supports: "tls" (with a CA certificate file, and
// a client certificate for mTLS; C-core, Go, Java and grpc-js-xds read
// `ca_certificate_file`, `certificate_file` and `private_key_file` in its
// config) or "insecure".
#ifndef ASIDE_CLIENT_XDS_BOOTSTRAP_H_
#define ASIDE_CLIENT_XDS_BOOTSTRAP_H_

#include <string>

#include "absl/status/statusor.h"

namespace aside {

struct XdsBootstrapOptions {
  // Aside's gRPC address, "host:port" ([v6]:port allowed).
  std::string server;
  // The node id clients report (Aside logs it with every rejection).
  std::string node_id = "aside-xds-client";
  // The client's locality (node.locality); Aside reads the zone for
  // locality-aware policies.
  std::string region;
  std::string zone;
  std::string sub_zone;
  // With a CA file: TLS channel credentials verifying Aside's certificate;
  // with a certificate and key too: mutual TLS, so the client's identity
  // can be given the `report` role for its LRS load reports.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// The bootstrap JSON (xDS v3), ending in a newline. INVALID_ARGUMENT when
// the server has no port, or a certificate comes without its key.
absl::StatusOr<std::string> XdsBootstrapJson(
    const XdsBootstrapOptions& options);

}  // namespace aside

#endif  // ASIDE_CLIENT_XDS_BOOTSTRAP_H_
