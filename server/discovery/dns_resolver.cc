#include "server/discovery/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/discovery/dns_answer.h"

namespace aside::server {
namespace {

absl::Status InitAresOnce() {
  static const int rc = ares_library_init(ARES_LIB_INIT_ALL);
  if (rc != ARES_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("c-ares: library init failed: ", ares_strerror(rc)));
  }
  return absl::OkStatus();
}

DnsOutcome OutcomeOf(int ares_status) {
  switch (ares_status) {
    case ARES_SUCCESS:
    case ARES_ENODATA:
      return DnsOutcome::kOk;
    case ARES_ENOTFOUND:
      return DnsOutcome::kNxdomain;
    case ARES_ETIMEOUT:
      return DnsOutcome::kTimeout;
    case ARES_ESERVFAIL:
      return DnsOutcome::kServfail;
    case ARES_EREFUSED:
    case ARES_ENOTIMP:
      return DnsOutcome::kRefused;
    case ARES_ECONNREFUSED:
      return DnsOutcome::kConnectionRefused;
    case ARES_EBADRESP:
    case ARES_EFORMERR:
      return DnsOutcome::kBadResponse;
    case ARES_EDESTRUCTION:
    case ARES_ECANCELLED:
      return DnsOutcome::kCancelled;
    default:
      return DnsOutcome::kError;
  }
}

// A lower-case description of a c-ares failure.
std::string Describe(int ares_status) {
  switch (OutcomeOf(ares_status)) {
    case DnsOutcome::kNxdomain:
      return "nxdomain (no such name)";
    case DnsOutcome::kTimeout:
      return "timeout";
    case DnsOutcome::kServfail:
      return "servfail";
    case DnsOutcome::kRefused:
      return ares_status == ARES_ENOTIMP ? "refused (notimp)" : "refused";
    case DnsOutcome::kConnectionRefused:
      return "connection refused";
    case DnsOutcome::kBadResponse:
      return "bad response";
    case DnsOutcome::kCancelled:
      return "cancelled (resolver shut down)";
    default:
      return absl::AsciiStrToLower(ares_strerror(ares_status));
  }
}

absl::Status StatusFor(DnsOutcome outcome, std::string message) {
  switch (outcome) {
    case DnsOutcome::kOk:
      return absl::OkStatus();
    case DnsOutcome::kNxdomain:
      return absl::NotFoundError(message);
    case DnsOutcome::kTimeout:
      return absl::DeadlineExceededError(message);
    case DnsOutcome::kCancelled:
      return absl::CancelledError(message);
    case DnsOutcome::kError:
      return absl::InternalError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// Failures after which the next server is asked. An answer (even NXDOMAIN)
// is final, as for the system resolver.
bool NextServerMayHelp(int ares_status) {
  switch (ares_status) {
    case ARES_ETIMEOUT:
    case ARES_ECONNREFUSED:
    case ARES_ESERVFAIL:
    case ARES_EREFUSED:
    case ARES_ENOTIMP:
    case ARES_EBADRESP:
    case ARES_EFORMERR:
      return true;
    default:
      return false;
  }
}

bool IsHardFailure(DnsOutcome outcome) {
  return outcome != DnsOutcome::kOk && outcome != DnsOutcome::kNxdomain;
}

absl::Duration FromTimeval(const timeval& tv) {
  return absl::Seconds(tv.tv_sec) + absl::Microseconds(tv.tv_usec);
}

}  // namespace

absl::string_view DnsOutcomeName(DnsOutcome outcome) {
  switch (outcome) {
    case DnsOutcome::kOk:
      return "ok";
    case DnsOutcome::kNxdomain:
      return "nxdomain";
    case DnsOutcome::kTimeout:
      return "timeout";
    case DnsOutcome::kServfail:
      return "servfail";
    case DnsOutcome::kRefused:
      return "refused";
    case DnsOutcome::kConnectionRefused:
      return "connection_refused";
    case DnsOutcome::kBadResponse:
      return "bad_response";
    case DnsOutcome::kCancelled:
      return "cancelled";
    case DnsOutcome::kError:
      return "error";
  }
  return "error";
}

absl::StatusOr<Address> ParseDnsServer(absl::string_view text) {
  std::string bare(text);
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  in_addr v4;
  in6_addr v6;
  char buf[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) {
    return Address{Address::Kind::kIpv4, bare, 53};
  }
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
    return Address{Address::Kind::kIpv6, buf, 53};
  }
  absl::StatusOr<Address> parsed = ParseAddress(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dns server: ", parsed.status().message()));
  }
  if (!parsed->is_ip()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dns server '", text, "': must be an IP address, not a host name"));
  }
  return parsed;
}

// The IPs of one name for one or both families.
struct DnsResolver::IpResult {
  DnsOutcome outcome = DnsOutcome::kOk;
  absl::Status status;
  // Canonical host text (no brackets, no port) with its family.
  std::vector<Address> ips;
};

// One ares_query in flight; owned by c-ares until its callback runs.
struct DnsResolver::QueryArg {
  absl::AnyInvocable<void(int, const unsigned char*, int)> on_answer;
};

// The channel of one server.
struct DnsResolver::Channel {
  DnsResolver* self = nullptr;
  size_t index = 0;
  ares_channel channel = nullptr;
};

// A and AAAA of one name, joined.
struct DnsResolver::HostQuery {
  std::string name;
  absl::AnyInvocable<void(IpResult)> done;
  IpResult a;
  IpResult aaaa;
  int remaining = 2;
};

struct DnsResolver::SrvQuery {
  struct Record {
    std::string target;
    uint16_t port = 0;
    uint16_t priority = 0;
  };
  std::string name;
  uint16_t default_port = 0;
  DnsResultCallback done;
  std::vector<Record> records;
  std::map<std::string, IpResult> targets;
  size_t remaining = 0;
};

absl::StatusOr<std::unique_ptr<DnsResolver>> DnsResolver::Create(
    const DnsResolverOptions& options) {
  if (options.timeout < absl::Milliseconds(1) ||
      options.timeout > absl::Minutes(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dns timeout: ", absl::FormatDuration(options.timeout),
                     " out of range 1ms..1m"));
  }
  if (options.tries < 1 || options.tries > 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("dns tries: ", options.tries, " out of range 1..10"));
  }
  std::vector<Address> servers;
  for (const std::string& text : options.servers) {
    absl::StatusOr<Address> server = ParseDnsServer(text);
    if (!server.ok()) {
      return server.status();
    }
    servers.push_back(*std::move(server));
  }
  if (absl::Status init = InitAresOnce(); !init.ok()) {
    return init;
  }

  ares_options opts;
  std::memset(&opts, 0, sizeof(opts));
  opts.timeout = static_cast<int>(absl::ToInt64Milliseconds(options.timeout));
  opts.tries = options.tries;
  // The RCODE reaches the callback (SERVFAIL stays SERVFAIL); failing over
  // to the next server is done here, one channel per server.
  opts.flags = ARES_FLAG_NOCHECKRESP;
  int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_FLAGS;

  if (servers.empty()) {
    // The system's servers: read /etc/resolv.conf through c-ares once.
    ares_channel probe = nullptr;
    if (int rc = ares_init_options(&probe, &opts, mask); rc != ARES_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("c-ares: init failed: ", ares_strerror(rc)));
    }
    ares_addr_port_node* list = nullptr;
    const int rc = ares_get_servers_ports(probe, &list);
    for (ares_addr_port_node* n = list; rc == ARES_SUCCESS && n != nullptr;
         n = n->next) {
      char buf[INET6_ADDRSTRLEN];
      const bool v4 = n->family == AF_INET;
      if (inet_ntop(n->family,
                    v4 ? static_cast<const void*>(&n->addr.addr4)
                       : static_cast<const void*>(&n->addr.addr6),
                    buf, sizeof(buf)) == nullptr) {
        continue;
      }
      const int port = n->udp_port != 0 ? n->udp_port : 53;
      servers.push_back(
          Address{v4 ? Address::Kind::kIpv4 : Address::Kind::kIpv6, buf,
                  static_cast<uint16_t>(port)});
    }
    if (list != nullptr) {
      ares_free_data(list);
    }
    ares_destroy(probe);
    if (servers.empty()) {
      return absl::FailedPreconditionError(
          "dns: no servers configured and none in /etc/resolv.conf");
    }
  }

  std::unique_ptr<DnsResolver> resolver(new DnsResolver());
  opts.sock_state_cb = &DnsResolver::OnSocketState;
  mask |= ARES_OPT_SOCK_STATE_CB;
  for (size_t i = 0; i < servers.size(); ++i) {
    auto channel = std::make_unique<Channel>();
    channel->self = resolver.get();
    channel->index = i;
    opts.sock_state_cb_data = channel.get();
    if (int rc = ares_init_options(&channel->channel, &opts, mask);
        rc != ARES_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("c-ares: init failed: ", ares_strerror(rc)));
    }
    Channel* raw = channel.get();
    resolver->channels_.push_back(std::move(channel));
    resolver->server_names_.push_back(servers[i].ToString());

    ares_addr_port_node node;
    std::memset(&node, 0, sizeof(node));
    node.next = nullptr;
    if (servers[i].kind == Address::Kind::kIpv4) {
      node.family = AF_INET;
      inet_pton(AF_INET, servers[i].host.c_str(), &node.addr.addr4);
    } else {
      node.family = AF_INET6;
      inet_pton(AF_INET6, servers[i].host.c_str(), &node.addr.addr6);
    }
    node.udp_port = servers[i].port;
    node.tcp_port = servers[i].port;
    if (int rc = ares_set_servers_ports(raw->channel, &node);
        rc != ARES_SUCCESS) {
      return absl::InternalError(absl::StrCat("c-ares: setting server ",
                                              servers[i].ToString(),
                                              " failed: ", ares_strerror(rc)));
    }
  }
  return resolver;
}

DnsResolver::~DnsResolver() {
  destroying_ = true;
  for (std::unique_ptr<Channel>& channel : channels_) {
    if (channel->channel != nullptr) {
      // Runs every pending callback with ARES_EDESTRUCTION; they start no
      // new query (destroying_).
      ares_destroy(channel->channel);
      channel->channel = nullptr;
    }
  }
}

void DnsResolver::OnAresAnswer(void* arg, int status, int /*timeouts*/,
                               unsigned char* answer, int length) {
  std::unique_ptr<QueryArg> query(static_cast<QueryArg*>(arg));
  query->on_answer(status, answer, length);
}

void DnsResolver::OnSocketState(void* data, int fd, int readable,
                                int writable) {
  auto* channel = static_cast<Channel*>(data);
  DnsResolver* self = channel->self;
  if (!readable && !writable) {
    self->sockets_.erase(fd);
    return;
  }
  self->sockets_[fd] = {
      channel->index,
      static_cast<short>((readable ? POLLIN : 0) | (writable ? POLLOUT : 0))};
}

void DnsResolver::Query(const std::string& name, int type, size_t index,
                        std::vector<std::string> failures,
                        AnswerHandler handler) {
  if (destroying_ || index >= channels_.size()) {
    handler(ARES_EDESTRUCTION, nullptr, 0, failures);
    return;
  }
  auto* arg = new QueryArg;
  arg->on_answer = [this, name, type, index, failures = std::move(failures),
                    handler = std::move(handler)](int status,
                                                  const unsigned char* answer,
                                                  int length) mutable {
    if (NextServerMayHelp(status) && !destroying_ &&
        index + 1 < channels_.size()) {
      failures.push_back(
          absl::StrCat(Describe(status), " from ", server_names_[index]));
      Query(name, type, index + 1, std::move(failures), std::move(handler));
      return;
    }
    if (OutcomeOf(status) != DnsOutcome::kOk &&
        OutcomeOf(status) != DnsOutcome::kCancelled) {
      failures.push_back(
          absl::StrCat(Describe(status), " from ", server_names_[index]));
    }
    handler(status, answer, length, failures);
  };
  ares_query(channels_[index]->channel, name.c_str(), ns_c_in, type,
             &DnsResolver::OnAresAnswer, arg);
}

void DnsResolver::QueryIps(const std::string& name, int type,
                           absl::AnyInvocable<void(IpResult)> done) {
  const char* type_name = type == ns_t_a ? "A" : "AAAA";
  Query(name, type, 0, {},
        [name, type, type_name, done = std::move(done)](
            int status, const unsigned char* answer, int length,
            const std::vector<std::string>& failures) mutable {
          IpResult result;
          if (status != ARES_SUCCESS) {
            // NODATA (the name exists without records of this type) is an
            // empty success.
            result.outcome = OutcomeOf(status);
            result.status = StatusFor(
                result.outcome,
                absl::StrCat("dns '", name, "' ", type_name, ": ",
                             failures.empty() ? Describe(status)
                                              : absl::StrJoin(failures, "; ")));
            done(std::move(result));
            return;
          }
          IpAnswer decoded = DecodeIpAnswer(type == ns_t_a, answer, length);
          if (decoded.rc == ARES_ENODATA) {  // e.g. only a CNAME to elsewhere
            done(std::move(result));
            return;
          }
          if (decoded.rc != ARES_SUCCESS) {
            result.outcome = DnsOutcome::kBadResponse;
            result.status = StatusFor(
                result.outcome,
                absl::StrCat("dns '", name, "' ", type_name, ": bad response (",
                             Describe(decoded.rc), ")"));
            done(std::move(result));
            return;
          }
          result.ips = std::move(decoded.ips);
          done(std::move(result));
        });
}

void DnsResolver::ResolveIps(const std::string& name,
                             absl::AnyInvocable<void(IpResult)> done) {
  auto query = std::make_shared<HostQuery>();
  query->name = name;
  query->done = std::move(done);
  auto finish = [query] {
    if (--query->remaining > 0) {
      return;
    }
    IpResult& a = query->a;
    IpResult& aaaa = query->aaaa;
    if (IsHardFailure(a.outcome)) {
      query->done(std::move(a));
      return;
    }
    if (IsHardFailure(aaaa.outcome)) {
      query->done(std::move(aaaa));
      return;
    }
    IpResult joined;
    if (a.outcome == DnsOutcome::kNxdomain &&
        aaaa.outcome == DnsOutcome::kNxdomain) {
      joined.outcome = DnsOutcome::kNxdomain;
      joined.status = StatusFor(
          joined.outcome,
          absl::StrCat("dns '", query->name, "': ", Describe(ARES_ENOTFOUND)));
    } else {
      joined.ips = std::move(a.ips);
      joined.ips.insert(joined.ips.end(), aaaa.ips.begin(), aaaa.ips.end());
    }
    query->done(std::move(joined));
  };
  QueryIps(name, ns_t_a, [query, finish](IpResult r) mutable {
    query->a = std::move(r);
    finish();
  });
  QueryIps(name, ns_t_aaaa, [query, finish](IpResult r) mutable {
    query->aaaa = std::move(r);
    finish();
  });
}

void DnsResolver::ResolveHost(absl::string_view name, uint16_t port,
                              DnsResultCallback done) {
  ++pending_;
  ResolveIps(std::string(name),
             [this, port, done = std::move(done)](IpResult r) mutable {
               --pending_;
               DnsResult result;
               result.outcome = r.outcome;
               result.status = std::move(r.status);
               std::set<std::string> unique;
               for (Address& ip : r.ips) {
                 ip.port = port;
                 unique.insert(ip.ToString());
               }
               result.addresses.assign(unique.begin(), unique.end());
               done(std::move(result));
             });
}

void DnsResolver::ResolveSrv(absl::string_view name, uint16_t default_port,
                             DnsResultCallback done) {
  ++pending_;
  auto query = std::make_shared<SrvQuery>();
  query->name = std::string(name);
  query->default_port = default_port;
  query->done = std::move(done);
  Query(query->name, ns_t_srv, 0, {},
        [this, query](int status, const unsigned char* answer, int length,
                      const std::vector<std::string>& failures) {
          OnSrvAnswer(query, status, answer, length, failures);
        });
}

void DnsResolver::OnSrvAnswer(const std::shared_ptr<SrvQuery>& query,
                              int status, const unsigned char* answer,
                              int length,
                              const std::vector<std::string>& failures) {
  auto fail = [&](DnsOutcome outcome, std::string message) {
    --pending_;
    DnsResult result;
    result.outcome = outcome;
    result.status = StatusFor(outcome, std::move(message));
    query->done(std::move(result));
  };
  auto succeed_empty = [&] {
    --pending_;
    query->done(DnsResult{});
  };
  if (status == ARES_ENODATA) {
    succeed_empty();
    return;
  }
  if (status != ARES_SUCCESS) {
    fail(OutcomeOf(status),
         absl::StrCat("dns srv '", query->name, "': ",
                      failures.empty() ? Describe(status)
                                       : absl::StrJoin(failures, "; ")));
    return;
  }
  SrvAnswer decoded = DecodeSrvAnswer(answer, length);
  if (decoded.rc == ARES_ENODATA) {
    succeed_empty();
    return;
  }
  if (decoded.rc != ARES_SUCCESS) {
    fail(DnsOutcome::kBadResponse,
         absl::StrCat("dns srv '", query->name, "': bad response (",
                      Describe(decoded.rc), ")"));
    return;
  }
  std::set<std::string> targets;
  for (SrvAnswer::Record& r : decoded.records) {
    targets.insert(r.target);
    query->records.push_back({std::move(r.target), r.port, r.priority});
  }
  if (query->records.empty()) {
    succeed_empty();
    return;
  }
  query->remaining = targets.size();
  for (const std::string& target : targets) {
    ResolveIps(target, [this, query, target](IpResult r) {
      query->targets[target] = std::move(r);
      if (--query->remaining == 0) {
        FinishSrv(query);
      }
    });
  }
}

void DnsResolver::FinishSrv(const std::shared_ptr<SrvQuery>& query) {
  --pending_;
  DnsResult result;
  for (const auto& [target, ips] : query->targets) {
    if (IsHardFailure(ips.outcome)) {
      result.outcome = ips.outcome;
      result.status = StatusFor(
          ips.outcome,
          absl::StrCat("dns srv '", query->name, "': ", ips.status.message()));
      query->done(std::move(result));
      return;
    }
  }
  // priority -> addresses of that tier.
  std::map<uint16_t, std::set<std::string>> tiers;
  for (const SrvQuery::Record& record : query->records) {
    const uint16_t port = record.port != 0 ? record.port : query->default_port;
    if (port == 0) {
      continue;
    }
    for (Address ip : query->targets[record.target].ips) {
      ip.port = port;
      tiers[record.priority].insert(ip.ToString());
    }
  }
  for (const auto& [priority, addresses] : tiers) {
    if (!addresses.empty()) {
      result.addresses.assign(addresses.begin(), addresses.end());
      query->done(std::move(result));
      return;
    }
  }
  result.outcome = DnsOutcome::kNxdomain;
  result.status = StatusFor(
      result.outcome,
      absl::StrCat("dns srv '", query->name, "': no target of ",
                   query->records.size(), " records resolved to an address"));
  query->done(std::move(result));
}

void DnsResolver::AppendPollFds(std::vector<pollfd>& fds) const {
  for (const auto& [fd, state] : sockets_) {
    fds.push_back(pollfd{fd, state.second, 0});
  }
}

absl::Duration DnsResolver::NextTimeout(absl::Duration max) const {
  absl::Duration next = max;
  for (const std::unique_ptr<Channel>& channel : channels_) {
    timeval max_tv;
    max_tv.tv_sec = absl::ToInt64Seconds(next);
    max_tv.tv_usec =
        absl::ToInt64Microseconds(next - absl::Seconds(max_tv.tv_sec));
    timeval tv;
    const timeval* t = ares_timeout(channel->channel, &max_tv, &tv);
    if (t != nullptr) {
      next = std::min(next, FromTimeval(*t));
    }
  }
  return next;
}

void DnsResolver::Process(absl::Span<const pollfd> fds) {
  for (const pollfd& p : fds) {
    if (p.revents == 0) {
      continue;
    }
    // Looked up per entry: an earlier entry's callbacks may have closed it.
    auto it = sockets_.find(p.fd);
    if (it == sockets_.end()) {
      continue;
    }
    const ares_socket_t read_fd =
        (p.revents & (POLLIN | POLLERR | POLLHUP)) ? p.fd : ARES_SOCKET_BAD;
    const ares_socket_t write_fd =
        (p.revents & POLLOUT) ? p.fd : ARES_SOCKET_BAD;
    ares_process_fd(channels_[it->second.first]->channel, read_fd, write_fd);
  }
  // Timeouts (and retries).
  for (std::unique_ptr<Channel>& channel : channels_) {
    ares_process_fd(channel->channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  }
}

}  // namespace aside::server
