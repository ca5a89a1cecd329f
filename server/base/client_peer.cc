#include "server/base/client_peer.h"

#include "absl/strings/strip.h"

namespace aside::server {

std::string ClientPeer(absl::string_view grpc_peer) {
  absl::string_view rest = grpc_peer;
  if (!absl::ConsumePrefix(&rest, "unix-abstract:") ||
      !absl::ConsumePrefix(&rest, kRelayNamePrefix)) {
    return std::string(grpc_peer);
  }
  // <pid>/<tag>/<seq>/<peer>
  for (int i = 0; i < 3; ++i) {
    const size_t slash = rest.find('/');
    if (slash == absl::string_view::npos) {
      return std::string(grpc_peer);
    }
    rest.remove_prefix(slash + 1);
  }
  return std::string(rest);
}

}  // namespace aside::server
