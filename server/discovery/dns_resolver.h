// An asynchronous DNS resolver on c-ares: A and AAAA for a name, or SRV and
// then A/AAAA of each target, against configured servers (or the system's
// /etc/resolv.conf). Results are canonical "ip:port" strings (see
// lib/address.h), sorted and without duplicates.
#ifndef ASIDE_SERVER_DISCOVERY_DNS_RESOLVER_H_
#define ASIDE_SERVER_DISCOVERY_DNS_RESOLVER_H_

#include <poll.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "lib/address.h"

namespace aside::server {

// Why a resolution ended. Bounded, so it can label metrics.
enum class DnsOutcome : uint8_t {
  kOk,
  kNxdomain,           // the name does not exist (RCODE 3)
  kTimeout,            // no answer within tries x timeout
  kServfail,           // RCODE 2 from every server
  kRefused,            // RCODE 5 (or NOTIMP) from every server
  kConnectionRefused,  // ICMP port unreachable / TCP RST from every server
  kBadResponse,        // malformed or unparsable answer
  kCancelled,          // the resolver was destroyed first
  kError,              // anything else (out of memory, bad name, ...)
};

// "ok", "nxdomain", "timeout", "servfail", "refused", "connection_refused",
// "bad_response", "cancelled", "error".
absl::string_view DnsOutcomeName(DnsOutcome outcome);

// The result of one resolution. `status` is OK iff `outcome` is kOk. An OK
// result may hold no addresses: the name exists but has no records of the
// asked types (NOERROR with an empty answer, "NODATA").
struct DnsResult {
  DnsOutcome outcome = DnsOutcome::kOk;
  absl::Status status;
  // Canonical "a.b.c.d:port" / "[v6]:port", sorted, unique.
  std::vector<std::string> addresses;
};

using DnsResultCallback = absl::AnyInvocable<void(DnsResult)>;

// Parses one DNS server: "127.0.0.1:5353", "[::1]:5353", or a bare IP
// ("127.0.0.1", "::1", "[::1]") meaning port 53. Host names are refused (a
// resolver cannot be found by name). Errors name the input.
absl::StatusOr<Address> ParseDnsServer(absl::string_view text);

struct DnsResolverOptions {
  // Servers tried in order: the next one when a server times out, refuses
  // the connection or answers SERVFAIL / REFUSED / NOTIMP / garbage. An
  // answer (addresses, NODATA or NXDOMAIN) from any server is final. Empty:
  // the nameservers of /etc/resolv.conf.
  std::vector<std::string> servers;
  // Per try. c-ares doubles it on each retry, so one server can take about
  // timeout x (2^tries - 1) before the next is asked.
  absl::Duration timeout = absl::Seconds(2);
  int tries = 2;
};

// One c-ares channel per server, and the glue to drive them from a poll()
// loop. A channel per server (rather than one channel with a server list)
// lets Aside fail over on SERVFAIL and REFUSED and still report them as
// such: c-ares 1.18 fails over on them only by hiding the RCODE (the query
// ends as "connection refused").
//
// Threading: not thread-safe. Every method, and every callback it runs, is
// on the one thread that owns it (DnsDiscovery's loop thread). Callbacks run
// from inside Resolve*() (for immediate failures), Process() and the
// destructor (with kCancelled for every query still pending).
//
// Cost: one UDP socket per server (TCP only for truncated answers), a few
// hundred bytes per query in flight; a slow or dead server delays only the
// queries sent to it, never the loop. c-ares keeps no cache (1.18), so every
// resolution asks a server.
class DnsResolver {
 public:
  // Fails on an unparsable server or when c-ares cannot initialise.
  static absl::StatusOr<std::unique_ptr<DnsResolver>> Create(
      const DnsResolverOptions& options);
  ~DnsResolver();
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // The servers queried, in order ("127.0.0.1:5353", "[::1]:53").
  const std::vector<std::string>& servers() const { return server_names_; }

  // A and AAAA of `name` in parallel; each address gets `port` (1..65535).
  // OK with the union when neither query failed; kNxdomain when both said
  // NXDOMAIN; otherwise the first failure (A, then AAAA). A name with only
  // one family is OK (the other query is NODATA).
  void ResolveHost(absl::string_view name, uint16_t port,
                   DnsResultCallback done);

  // SRV of `name`, then A/AAAA of every distinct target, each address with
  // its record's port (`default_port` when the record says 0; records with
  // port 0 are dropped when that is 0 too). Only the lowest-priority tier
  // that yields at least one address is used (RFC 2782: higher priorities
  // are backups). SRV weights are not used. Outcomes:
  //  - the SRV query fails or says NXDOMAIN: that outcome;
  //  - NODATA, or a single record with target "." (RFC 2782: "service
  //    decidedly not available"): OK with no addresses;
  //  - any target's lookup fails (other than NXDOMAIN / NODATA): that
  //    failure, so a partial answer never drops members;
  //  - no target has an address: kNxdomain ("no srv target resolved").
  void ResolveSrv(absl::string_view name, uint16_t default_port,
                  DnsResultCallback done);

  // The sockets c-ares wants watched, appended to `fds` (events set,
  // revents 0).
  void AppendPollFds(std::vector<pollfd>& fds) const;

  // How long the loop may sleep before c-ares needs Process() for a
  // timeout, at most `max`.
  absl::Duration NextTimeout(absl::Duration max) const;

  // Reads and writes what `fds` (after poll) report ready and handles
  // timeouts. Entries for sockets c-ares does not know are ignored.
  void Process(absl::Span<const pollfd> fds);

  // Top-level resolutions (ResolveHost/ResolveSrv calls) not yet completed.
  size_t pending() const { return pending_; }

 private:
  struct IpResult;
  struct HostQuery;
  struct SrvQuery;
  struct QueryArg;
  struct Channel;
  // An answer: the c-ares status, the packet, and the failures of the
  // servers asked before ("timeout from 127.0.0.1:53").
  using AnswerHandler = absl::AnyInvocable<void(
      int status, const unsigned char* answer, int length,
      const std::vector<std::string>& failures)>;

  DnsResolver() = default;

  // Sends `name`/`type` to server `index`, then to the next ones while they
  // fail (see DnsResolverOptions::servers).
  void Query(const std::string& name, int type, size_t index,
             std::vector<std::string> failures, AnswerHandler handler);
  // A or AAAA of `name`; `done` gets the IPs (canonical host text).
  void QueryIps(const std::string& name, int type,
                absl::AnyInvocable<void(IpResult)> done);
  void ResolveIps(const std::string& name,
                  absl::AnyInvocable<void(IpResult)> done);
  void OnSrvAnswer(const std::shared_ptr<SrvQuery>& query, int status,
                   const unsigned char* answer, int length,
                   const std::vector<std::string>& failures);
  void FinishSrv(const std::shared_ptr<SrvQuery>& query);

  static void OnAresAnswer(void* arg, int status, int timeouts,
                           unsigned char* answer, int length);
  static void OnSocketState(void* data, int fd, int readable, int writable);

  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<std::string> server_names_;
  // Sockets c-ares asked to watch: fd -> (channel index, poll events).
  std::map<int, std::pair<size_t, short>> sockets_;
  size_t pending_ = 0;
  bool destroying_ = false;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_DISCOVERY_DNS_RESOLVER_H_
