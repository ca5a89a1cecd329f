// Decoding of DNS answers (the bytes a DNS server sent back) into
// addresses and SRV records, with c-ares' parsers. Pure functions: the
// resolver's glue (dns_resolver.cc) hands them what the server answered;
// the fuzz target dns_answer_fuzz hands them anything.
//
// Thread-safety: every function may be called from any thread.
#ifndef ASIDE_SERVER_DISCOVERY_DNS_ANSWER_H_
#define ASIDE_SERVER_DISCOVERY_DNS_ANSWER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "lib/address.h"

namespace aside::server {

struct IpAnswer {
  // ARES_SUCCESS, ARES_ENODATA (no records of the type, e.g. only a CNAME
  // to elsewhere) or the parser's error.
  int rc = 0;
  std::vector<Address> ips;  // port 0
};

// An A (`v4`) or AAAA answer.
IpAnswer DecodeIpAnswer(bool v4, const unsigned char* answer, int length);

struct SrvAnswer {
  struct Record {
    std::string target;  // lower case, without the final dot
    uint16_t port = 0;
    uint16_t priority = 0;
  };
  // As IpAnswer::rc; ARES_EBADRESP too when every record's target is
  // invalid.
  int rc = 0;
  // Records whose target is "." (no service at this name) or not a host
  // name (counted in invalid_targets) are left out.
  std::vector<Record> records;
  int invalid_targets = 0;
};

SrvAnswer DecodeSrvAnswer(const unsigned char* answer, int length);

}  // namespace aside::server

#endif  // ASIDE_SERVER_DISCOVERY_DNS_ANSWER_H_
