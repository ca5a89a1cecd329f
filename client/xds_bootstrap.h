// The bootstrap a stock gRPC client needs to use Aside as its xDS
// management server (GRPC_XDS_BOOTSTRAP names a file holding it, or
// GRPC_XDS_BOOTSTRAP_CONFIG holds it). It lists `ignore_resource_deletion`
// so that clients keep their last configuration when a restarted server
// answers before it has loaded its groups, instead of dropping everything.
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
};

// The bootstrap JSON (insecure channel credentials, xDS v3), ending in a
// newline. INVALID_ARGUMENT when the server has no port.
absl::StatusOr<std::string> XdsBootstrapJson(
    const XdsBootstrapOptions& options);

}  // namespace aside

#endif  // ASIDE_CLIENT_XDS_BOOTSTRAP_H_
