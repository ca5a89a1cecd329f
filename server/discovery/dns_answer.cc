#include "server/discovery/dns_answer.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace aside::server {

IpAnswer DecodeIpAnswer(bool v4, const unsigned char* answer, int length) {
  IpAnswer result;
  hostent* host = nullptr;
  result.rc =
      v4 ? ares_parse_a_reply(answer, length, &host, nullptr, nullptr)
         : ares_parse_aaaa_reply(answer, length, &host, nullptr, nullptr);
  if (result.rc != ARES_SUCCESS || host == nullptr) {
    if (host != nullptr) {
      ares_free_hostent(host);
    }
    if (result.rc == ARES_SUCCESS) {
      result.rc = ARES_EBADRESP;
    }
    return result;
  }
  const int family = host->h_addrtype;
  if (family == AF_INET || family == AF_INET6) {
    for (char** p = host->h_addr_list; p != nullptr && *p != nullptr; ++p) {
      char buf[INET6_ADDRSTRLEN];
      if (inet_ntop(family, *p, buf, sizeof(buf)) != nullptr) {
        result.ips.push_back(Address{
            family == AF_INET ? Address::Kind::kIpv4 : Address::Kind::kIpv6,
            buf, 0});
      }
    }
  }
  ares_free_hostent(host);
  return result;
}

SrvAnswer DecodeSrvAnswer(const unsigned char* answer, int length) {
  SrvAnswer result;
  ares_srv_reply* reply = nullptr;
  result.rc = ares_parse_srv_reply(answer, length, &reply);
  if (result.rc == ARES_SUCCESS) {
    for (ares_srv_reply* r = reply; r != nullptr; r = r->next) {
      std::string target = absl::AsciiStrToLower(r->host ? r->host : "");
      if (!target.empty() && target.back() == '.') {
        target.pop_back();
      }
      if (target.empty()) {  // "." : no service at this name
        continue;
      }
      // c-ares hands over any label bytes, escaped ("\\." inside a label,
      // "\\000"...): a target that is not a host name would become a
      // backend address nothing can reach.
      absl::StatusOr<Address> host = ParseAddress(absl::StrCat(target, ":1"));
      if (!host.ok() || host->kind != Address::Kind::kHostname) {
        ++result.invalid_targets;
        continue;
      }
      result.records.push_back({std::move(target), r->port, r->priority});
    }
    if (result.records.empty() && result.invalid_targets > 0) {
      result.rc = ARES_EBADRESP;
    }
  }
  if (reply != nullptr) {
    ares_free_data(reply);
  }
  return result;
}

}  // namespace aside::server
