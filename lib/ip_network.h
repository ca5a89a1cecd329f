// IP networks in CIDR form ("10.0.0.0/8", "fd00::/8", "127.0.0.1" for one
// host), and whether a peer's address lies in one: the trust that
// `load_reports.trusted_networks` gives callers that carry no credential
// (server/auth/report_auth.h).
//
// An IPv4 peer seen as an IPv4-mapped IPv6 address (::ffff:10.0.0.1) is
// matched as the IPv4 address. Immutable values, thread-safe.
#ifndef ASIDE_LIB_IP_NETWORK_H_
#define ASIDE_LIB_IP_NETWORK_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aside {

struct IpNetwork {
  // The address in network order; IPv4 in the first 4 bytes.
  std::array<uint8_t, 16> bytes{};
  bool v6 = false;
  int prefix = 0;  // bits, 0..32 (IPv4) or 0..128 (IPv6)
  std::string text;

  friend bool operator==(const IpNetwork&, const IpNetwork&) = default;
};

// "a.b.c.d/n", "v6/n", or an address alone (a single host). Host bits set
// under the prefix are refused ("10.0.0.1/8" names no network).
absl::StatusOr<IpNetwork> ParseNetwork(absl::string_view text);

// Whether `host` (an address without port or brackets) is in any of
// `networks`; false for anything that is not an address.
bool InNetworks(const std::vector<IpNetwork>& networks, absl::string_view host);

}  // namespace aside

#endif  // ASIDE_LIB_IP_NETWORK_H_
