#include "lib/address.h"

#include <arpa/inet.h>

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aside {
namespace {

bool ValidHostname(absl::string_view host) {
  if (host.empty() || host.size() > 253) {
    return false;
  }
  size_t label_len = 0;
  char prev = '.';
  for (char c : host) {
    if (c == '.') {
      if (label_len == 0 || prev == '-') {
        return false;
      }
      label_len = 0;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
               c == '_') {
      if (label_len == 0 && c == '-') {
        return false;
      }
      if (++label_len > 63) {
        return false;
      }
    } else {
      return false;
    }
    prev = c;
  }
  return prev != '-';
}

absl::StatusOr<Address> Parse(absl::string_view text, bool allow_port_zero);

}  // namespace

std::string Address::ToString() const {
  if (kind == Kind::kIpv6) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<Address> ParseAddress(absl::string_view text) {
  return Parse(text, /*allow_port_zero=*/false);
}

absl::StatusOr<Address> ParseListenAddress(absl::string_view text) {
  return Parse(text, /*allow_port_zero=*/true);
}

namespace {

absl::StatusOr<Address> Parse(absl::string_view text, bool allow_port_zero) {
  if (text.empty()) {
    return absl::InvalidArgumentError("address is empty");
  }
  if (text.size() > 300) {
    return absl::InvalidArgumentError("address is longer than 300 bytes");
  }
  Address out;
  absl::string_view host;
  absl::string_view port;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': missing ']'"));
    }
    host = text.substr(1, close - 1);
    absl::string_view rest = text.substr(close + 1);
    if (rest.size() < 2 || rest.front() != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': expected ':port' after ']'"));
    }
    port = rest.substr(1);
    in6_addr v6;
    const std::string host_str(host);
    if (inet_pton(AF_INET6, host_str.c_str(), &v6) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': invalid IPv6 address"));
    }
    char buf[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
    out.kind = Address::Kind::kIpv6;
    out.host = buf;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", text, "': missing ':port'"));
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address '", text, "': IPv6 addresses must be written [addr]:port"));
    }
    const std::string host_str(host);
    in_addr v4;
    if (inet_pton(AF_INET, host_str.c_str(), &v4) == 1) {
      out.kind = Address::Kind::kIpv4;
      out.host = host_str;
    } else {
      bool all_digits_and_dots = !host.empty();
      for (char c : host) {
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') {
          all_digits_and_dots = false;
        }
      }
      if (all_digits_and_dots || !ValidHostname(host)) {
        return absl::InvalidArgumentError(
            absl::StrCat("address '", text, "': invalid host '", host, "'"));
      }
      out.kind = Address::Kind::kHostname;
      out.host = absl::AsciiStrToLower(host);
    }
  }
  uint32_t port_num = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &port_num)) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': invalid port '", port, "'"));
  }
  const uint32_t low = allow_port_zero ? 0 : 1;
  if (port_num < low || port_num > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", text, "': port ", port_num, " out of range ",
                     low, "..65535"));
  }
  out.port = static_cast<uint16_t>(port_num);
  return out;
}

}  // namespace

absl::StatusOr<std::string> CanonicalAddress(absl::string_view text) {
  absl::StatusOr<Address> parsed = ParseAddress(text);
  if (!parsed.ok()) {
    return parsed.status();
  }
  return parsed->ToString();
}

}  // namespace aside
