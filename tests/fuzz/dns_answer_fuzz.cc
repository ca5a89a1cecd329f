// DNS answers as a DNS server sends them (server/discovery/dns_answer.h):
// the first byte picks A, AAAA or SRV, the rest is the answer. Whatever the
// bytes, decoding ends with a c-ares code, and what it returns is usable:
// addresses of the asked-for family that parse back, SRV targets that are
// non-empty, lower case and without the final dot.
#include <ares.h>

#include <cstddef>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "server/discovery/dns_answer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) {
    return 0;
  }
  const int kind = data[0] % 3;
  const unsigned char* answer = data + 1;
  const int length = static_cast<int>(size - 1);
  if (kind < 2) {
    const bool v4 = kind == 0;
    aside::server::IpAnswer a =
        aside::server::DecodeIpAnswer(v4, answer, length);
    if (a.rc != ARES_SUCCESS && !a.ips.empty()) {
      __builtin_trap();
    }
    for (const aside::Address& ip : a.ips) {
      if (ip.kind !=
          (v4 ? aside::Address::Kind::kIpv4 : aside::Address::Kind::kIpv6)) {
        __builtin_trap();
      }
      const std::string text = v4 ? absl::StrCat(ip.host, ":80")
                                  : absl::StrCat("[", ip.host, "]:80");
      if (!aside::ParseAddress(text).ok()) {
        __builtin_trap();
      }
    }
    return 0;
  }
  aside::server::SrvAnswer srv = aside::server::DecodeSrvAnswer(answer, length);
  if (srv.rc != ARES_SUCCESS && !srv.records.empty()) {
    __builtin_trap();
  }
  for (const aside::server::SrvAnswer::Record& r : srv.records) {
    if (r.target.empty() || r.target.back() == '.' ||
        r.target != absl::AsciiStrToLower(r.target)) {
      __builtin_trap();
    }
  }
  return 0;
}
