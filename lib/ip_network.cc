#include "lib/ip_network.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aside {
namespace {

// Parses an address; IPv4-mapped IPv6 addresses become IPv4.
bool ParseAddress(const std::string& text, std::array<uint8_t, 16>* out,
                  bool* v6) {
  out->fill(0);
  in_addr a4;
  if (inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    std::memcpy(out->data(), &a4, 4);
    *v6 = false;
    return true;
  }
  in6_addr a6;
  if (inet_pton(AF_INET6, text.c_str(), &a6) != 1) {
    return false;
  }
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(&a6, kMapped, 12) == 0) {
    std::memcpy(out->data(), reinterpret_cast<const uint8_t*>(&a6) + 12, 4);
    *v6 = false;
    return true;
  }
  std::memcpy(out->data(), &a6, 16);
  *v6 = true;
  return true;
}

bool SamePrefix(const std::array<uint8_t, 16>& a,
                const std::array<uint8_t, 16>& b, int bits) {
  int i = 0;
  for (; bits >= 8; bits -= 8, ++i) {
    if (a[i] != b[i]) {
      return false;
    }
  }
  if (bits == 0) {
    return true;
  }
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits));
  return (a[i] & mask) == (b[i] & mask);
}

}  // namespace

absl::StatusOr<IpNetwork> ParseNetwork(absl::string_view text) {
  IpNetwork n;
  n.text = std::string(text);
  const size_t slash = text.find('/');
  const std::string address(text.substr(0, slash));
  if (!ParseAddress(address, &n.bytes, &n.v6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not an IPv4 or IPv6 address"));
  }
  const int max = n.v6 ? 128 : 32;
  n.prefix = max;
  if (slash != absl::string_view::npos) {
    if (!absl::SimpleAtoi(text.substr(slash + 1), &n.prefix) || n.prefix < 0 ||
        n.prefix > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefix length '", text.substr(slash + 1),
                       "' is not within 0..", max));
    }
  }
  std::array<uint8_t, 16> network = n.bytes;
  for (int bit = n.prefix; bit < max; ++bit) {
    network[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  if (network != n.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' has host bits set past /", n.prefix));
  }
  return n;
}

bool InNetworks(const std::vector<IpNetwork>& networks,
                absl::string_view host) {
  std::array<uint8_t, 16> bytes;
  bool v6 = false;
  if (networks.empty() || !ParseAddress(std::string(host), &bytes, &v6)) {
    return false;
  }
  for (const IpNetwork& n : networks) {
    if (n.v6 == v6 && SamePrefix(n.bytes, bytes, n.prefix)) {
      return true;
    }
  }
  return false;
}

}  // namespace aside
