// Backend addresses: "a.b.c.d:port", "[v6]:port" or "host:port".
#ifndef ASIDE_LIB_ADDRESS_H_
#define ASIDE_LIB_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aside {

struct Address {
  enum class Kind { kIpv4, kIpv6, kHostname };
  Kind kind = Kind::kIpv4;
  // The host without brackets: "10.0.0.1", "::1", "payments.svc".
  std::string host;
  uint16_t port = 0;

  // Canonical text form: IPv6 compressed and bracketed, host names lower
  // case. Two spellings of one address have the same canonical form.
  std::string ToString() const;
  bool is_ip() const { return kind != Kind::kHostname; }
};

// Parses and validates an address. Errors name the problem, e.g.
// "port 70000 out of range 1..65535". A host name is at most 253 bytes of
// dot-separated labels, each 1..63 letters, digits, '-' or '_' and neither
// starting nor ending with '-' (RFC 1123 host names, plus the '_' of
// service labels such as _grpclb._tcp); one trailing dot is allowed.
absl::StatusOr<Address> ParseAddress(absl::string_view text);

// Same, for an address to listen on: port 0 (any free port) is allowed.
absl::StatusOr<Address> ParseListenAddress(absl::string_view text);

// Parses and returns the canonical form (see Address::ToString).
absl::StatusOr<std::string> CanonicalAddress(absl::string_view text);

}  // namespace aside

#endif  // ASIDE_LIB_ADDRESS_H_
