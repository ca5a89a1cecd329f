#include "server/net/connection_gate.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/net/peer_admission.h"

namespace aside::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSweepInterval = std::chrono::seconds(1);
constexpr auto kRefusalSweepInterval = std::chrono::milliseconds(100);
constexpr auto kAcceptPause = std::chrono::milliseconds(10);
constexpr auto kWarnInterval = std::chrono::seconds(10);
constexpr int kAcceptsPerWake = 64;

std::string Errno(int e) { return std::strerror(e); }

// A socket bound and listening on `addr`, or an error naming the reason.
// `*error` is the errno of a failure.
absl::StatusOr<int> Listen(const sockaddr* addr, socklen_t len, bool dual_stack,
                           int* error) {
  const int fd =
      socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return absl::UnavailableError(Errno(errno));
  }
  const int one = 1;
  const int zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Accepted sockets inherit it (gRPC sets it on its own listeners).
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (addr->sa_family == AF_INET6) {
    const int* v6only = dual_stack ? &zero : &one;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, v6only, sizeof(int));
  }
  if (bind(fd, addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    *error = errno;
    close(fd);
    return absl::UnavailableError(Errno(*error));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return 0;
  }
  return ntohs(ss.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void SetPort(sockaddr_storage* ss, int port) {
  if (ss->ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(ss)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(ss)->sin_port = htons(port);
  }
}

// The addresses to bind for `host`, and whether the first is the
// dual-stack wildcard.
struct Targets {
  std::vector<std::pair<sockaddr_storage, socklen_t>> addrs;
  bool wildcard = false;
};

absl::StatusOr<Targets> Resolve(const Address& a) {
  Targets t;
  if (a.host == "0.0.0.0" || a.host == "::") {
    t.wildcard = true;
    sockaddr_storage v6{};
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&v6);
    s6->sin6_family = AF_INET6;
    s6->sin6_addr = in6addr_any;
    t.addrs.emplace_back(v6, sizeof(sockaddr_in6));
    sockaddr_storage v4{};
    auto* s4 = reinterpret_cast<sockaddr_in*>(&v4);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_ANY);
    t.addrs.emplace_back(v4, sizeof(sockaddr_in));
    return t;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = getaddrinfo(a.host.c_str(), nullptr, &hints, &list);
      rc != 0) {
    return absl::UnavailableError(gai_strerror(rc));
  }
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    const bool seen =
        std::any_of(t.addrs.begin(), t.addrs.end(), [&](const auto& other) {
          return other.second == ai->ai_addrlen &&
                 std::memcmp(&other.first, &ss, ai->ai_addrlen) == 0;
        });
    if (!seen) {
      t.addrs.emplace_back(ss, ai->ai_addrlen);
    }
  }
  freeaddrinfo(list);
  if (t.addrs.empty()) {
    return absl::UnavailableError("no address");
  }
  return t;
}

}  // namespace

// Everything the accept thread owns; touched by that thread only.
class ConnectionGate::Loop {
 public:
  Loop(std::vector<int> listeners, int wake, ConnectionGateOptions options,
       std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor,
       GuardedRelay* relay)
      : listeners_(std::move(listeners)),
        relay_(relay),
        wake_(wake),
        options_(options),
        acceptor_(std::move(acceptor)),
        admission_(options.max_connections, options.max_connections_per_peer),
        m_(*options.metrics),
        pending_gauge_(m_.grpc_connections.Add({{"state", "pending"}})),
        active_gauge_(m_.grpc_connections.Add({{"state", "active"}})),
        evicted_(m_.grpc_connections_closed.Add({{"reason", "evicted"}})),
        timed_out_(
            m_.grpc_connections_closed.Add({{"reason", "handshake_timeout"}})),
        hung_up_(m_.grpc_connections_closed.Add({{"reason", "hung_up"}})),
        refused_total_(m_.limit_refused.Add({{"limit", "max_connections"}})),
        refused_peer_(
            m_.limit_refused.Add({{"limit", "max_connections_per_peer"}})) {}

  ~Loop() {
    for (const Pending& p : pending_) {
      close(p.fd);
    }
    if (epoll_ >= 0) {
      close(epoll_);
    }
    if (spare_ >= 0) {
      close(spare_);
    }
    pending_gauge_.Set(0);
    active_gauge_.Set(0);
  }

  void Run();

 private:
  struct Pending {
    int fd;
    int listener;
    uint32_t seq;
    std::string peer;
    Clock::time_point deadline;
    sockaddr_storage addr;
    socklen_t addr_len;
  };
  struct Active {
    uint64_t cookie;
    std::string peer;
  };
  enum class Close { kEvicted, kTimedOut, kHungUp };

  void Watch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = static_cast<uint64_t>(fd);
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  }
  void SetAccepting(bool on);
  void AcceptFrom(int listener, Clock::time_point now);
  void Admit(int fd, int listener, const sockaddr_storage& addr, socklen_t len,
             Clock::time_point now);
  void Refuse(int fd, const std::string& peer, PeerAdmission::Refusal why);
  void OnPending(uint64_t data, uint32_t events);
  void HandOff(std::list<Pending>::iterator it);
  void ClosePending(std::list<Pending>::iterator it, Close why);
  void Retire(int fd);
  void Sweep();
  void Gauges() {
    pending_gauge_.Set(static_cast<double>(pending_.size()));
    active_gauge_.Set(static_cast<double>(active_.size()));
  }

  const std::vector<int> listeners_;
  GuardedRelay* const relay_;  // or null
  const int wake_;
  const ConnectionGateOptions options_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  PeerAdmission admission_;
  Metrics& m_;
  prometheus::Gauge& pending_gauge_;
  prometheus::Gauge& active_gauge_;
  prometheus::Counter& evicted_;
  prometheus::Counter& timed_out_;
  prometheus::Counter& hung_up_;
  prometheus::Counter& refused_total_;
  prometheus::Counter& refused_peer_;

  int epoll_ = -1;
  int spare_ = -1;  // given up to accept (and close) past EMFILE
  bool accepting_ = true;
  Clock::time_point resume_at_{};
  Clock::time_point next_sweep_{};
  Clock::time_point last_refusal_sweep_{};
  uint32_t next_seq_ = 0;
  // Waiting connections, oldest (and so first to time out) first.
  std::list<Pending> pending_;
  absl::flat_hash_map<int, std::list<Pending>::iterator> pending_by_fd_;
  absl::flat_hash_map<int, Active> active_;
  // Rate-limited warnings: when the last went out, and how many since.
  Clock::time_point last_warning_[2]{};
  uint64_t unwarned_[2] = {0, 0};
  Clock::time_point last_accept_warning_{};
};

void ConnectionGate::Loop::Run() {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  Watch(wake_, EPOLLIN);
  for (int fd : listeners_) {
    Watch(fd, EPOLLIN);
  }
  next_sweep_ = Clock::now() + kSweepInterval;
  epoll_event events[256];
  for (;;) {
    Clock::time_point now = Clock::now();
    Clock::time_point wake_at = next_sweep_;
    if (!pending_.empty()) {
      wake_at = std::min(wake_at, pending_.front().deadline);
    }
    if (!accepting_) {
      wake_at = std::min(wake_at, resume_at_);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(
        std::max(wake_at - now, Clock::duration::zero()));
    const int n =
        epoll_wait(epoll_, events, 256, static_cast<int>(wait.count()));
    now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffff);
      if (fd == wake_) {
        return;
      }
      if (std::find(listeners_.begin(), listeners_.end(), fd) !=
          listeners_.end()) {
        AcceptFrom(fd, now);
      } else {
        OnPending(events[i].data.u64, events[i].events);
      }
    }
    while (!pending_.empty() && pending_.front().deadline <= now) {
      ClosePending(pending_.begin(), Close::kTimedOut);
    }
    if (!accepting_ && now >= resume_at_) {
      SetAccepting(true);
    }
    if (now >= next_sweep_) {
      Sweep();
      next_sweep_ = now + kSweepInterval;
    }
    Gauges();
  }
}

void ConnectionGate::Loop::SetAccepting(bool on) {
  accepting_ = on;
  for (int fd : listeners_) {
    epoll_event ev{};
    ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
    ev.data.u64 = static_cast<uint64_t>(fd);
    epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &ev);
  }
}

void ConnectionGate::Loop::AcceptFrom(int listener, Clock::time_point now) {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listener, reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd, listener, addr, len, now);
      continue;
    }
    const int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      return;
    }
    if (e == EINTR || e == ECONNABORTED) {
      continue;
    }
    m_.grpc_accept_errors.Increment();
    const bool out_of_files = e == EMFILE || e == ENFILE;
    const bool evict = out_of_files && !pending_.empty();
    if (now - last_accept_warning_ >= kWarnInterval) {
      last_accept_warning_ = now;
      Log(LogLevel::kWarn, "grpc.accept_error",
          {{"error", Errno(e)},
           {"action", evict          ? "closing the oldest silent connection"
                      : out_of_files ? "closing the new connection"
                                     : "retrying in 10ms"}});
    }
    if (evict) {
      // Out of descriptors before the cap (something else holds them): a
      // silent connection makes room, as at the cap.
      ClosePending(pending_.begin(), Close::kEvicted);
      continue;
    }
    if (out_of_files && spare_ >= 0) {
      // Nothing to evict: give up the spare to take the connection off the
      // queue and close it, so that the listener does not stay readable
      // (and the peer learns at once).
      close(spare_);
      const int taken = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (taken >= 0) {
        close(taken);
      }
      spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      continue;
    }
    if (spare_ < 0) {
      spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    SetAccepting(false);
    resume_at_ = now + kAcceptPause;
    return;
  }
}

void ConnectionGate::Loop::Admit(int fd, int listener,
                                 const sockaddr_storage& addr, socklen_t len,
                                 Clock::time_point now) {
  // The number is the kernel's again: the socket gRPC held under it is gone.
  Retire(fd);
  std::string peer = PeerKey(reinterpret_cast<const sockaddr*>(&addr), len);
  PeerAdmission::Refusal why = admission_.Check(peer);
  if (why != PeerAdmission::Refusal::kNone &&
      now - last_refusal_sweep_ >= kRefusalSweepInterval) {
    last_refusal_sweep_ = now;
    Sweep();
    why = admission_.Check(peer);
  }
  if (why == PeerAdmission::Refusal::kTotal && !pending_.empty()) {
    ClosePending(pending_.begin(), Close::kEvicted);
    why = admission_.Check(peer);
  }
  if (why != PeerAdmission::Refusal::kNone) {
    Refuse(fd, peer, why);
    return;
  }
  admission_.Add(peer);
  const uint32_t seq = ++next_seq_;
  pending_.push_back(
      {.fd = fd,
       .listener = listener,
       .seq = seq,
       .peer = std::move(peer),
       .deadline = now + absl::ToChronoNanoseconds(options_.handshake_timeout),
       .addr = addr,
       .addr_len = len});
  pending_by_fd_[fd] = std::prev(pending_.end());
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = (static_cast<uint64_t>(seq) << 32) | static_cast<uint32_t>(fd);
  epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
}

void ConnectionGate::Loop::Refuse(int fd, const std::string& peer,
                                  PeerAdmission::Refusal why) {
  const bool total = why == PeerAdmission::Refusal::kTotal;
  // Counted before the peer can see the close.
  (total ? refused_total_ : refused_peer_).Increment();
  close(fd);
  const int k = total ? 0 : 1;
  const Clock::time_point now = Clock::now();
  if (now - last_warning_[k] < kWarnInterval) {
    ++unwarned_[k];
    return;
  }
  last_warning_[k] = now;
  Log(LogLevel::kWarn, "grpc.connection_refused",
      {{"peer", peer.empty() ? "-" : peer},
       {"limit",
        total ? "limits.max_connections" : "limits.max_connections_per_peer"},
       {"cap", absl::StrCat(total ? admission_.max_total()
                                  : admission_.max_per_peer())},
       {"also_refused_since_last_log", absl::StrCat(unwarned_[k])}});
  unwarned_[k] = 0;
}

void ConnectionGate::Loop::OnPending(uint64_t data, uint32_t events) {
  const int fd = static_cast<int>(data & 0xffffffff);
  const auto seq = static_cast<uint32_t>(data >> 32);
  auto found = pending_by_fd_.find(fd);
  // An event of a socket closed earlier in this round (its number may
  // already be a newer connection's).
  if (found == pending_by_fd_.end() || found->second->seq != seq) {
    return;
  }
  // A connection that hung up (EOF reads as readable) is not handed off: a
  // gRPC client never half-closes, and a relayed one would cost two
  // descriptors more just to see the end.
  if ((events & EPOLLIN) != 0 &&
      (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) {
    HandOff(found->second);
  } else {
    ClosePending(found->second, Close::kHungUp);
  }
}

void ConnectionGate::Loop::HandOff(std::list<Pending>::iterator it) {
  const int fd = it->fd;
  epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) {
    ClosePending(it, Close::kHungUp);  // not tracked, so never handed off
    return;
  }
  int to_grpc = fd;
  if (relay_ != nullptr) {
    const sockaddr* addr = reinterpret_cast<const sockaddr*>(&it->addr);
    to_grpc = relay_->Adopt(fd, addr, it->addr_len);
    // The relay's socket pair needs two descriptors: out of them, silent
    // connections make room, as for accepting.
    for (int evictions = 0;
         to_grpc < 0 && (errno == EMFILE || errno == ENFILE) && evictions < 2 &&
         pending_.size() > 1;
         ++evictions) {
      ClosePending(pending_.begin() == it ? std::next(pending_.begin())
                                          : pending_.begin(),
                   Close::kEvicted);
      to_grpc = relay_->Adopt(fd, addr, it->addr_len);
    }
    if (to_grpc < 0) {
      ClosePending(it, Close::kHungUp);
      return;
    }
  }
  active_[fd] = Active{.cookie = cookie, .peer = std::move(it->peer)};
  const int listener = it->listener;
  pending_by_fd_.erase(fd);
  pending_.erase(it);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
      params;
  params.listener_fd = listener;
  params.fd = to_grpc;
  acceptor_->HandleNewConnection(&params);
}

void ConnectionGate::Loop::ClosePending(std::list<Pending>::iterator it,
                                        Close why) {
  (why == Close::kEvicted    ? evicted_
   : why == Close::kTimedOut ? timed_out_
                             : hung_up_)
      .Increment();
  close(it->fd);  // also leaves the epoll set
  admission_.Remove(it->peer);
  pending_by_fd_.erase(it->fd);
  pending_.erase(it);
}

void ConnectionGate::Loop::Retire(int fd) {
  auto it = active_.find(fd);
  if (it != active_.end()) {
    admission_.Remove(it->second.peer);
    active_.erase(it);
  }
}

void ConnectionGate::Loop::Sweep() {
  for (auto it = active_.begin(); it != active_.end();) {
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (getsockopt(it->first, SOL_SOCKET, SO_COOKIE, &cookie, &len) == 0 &&
        cookie == it->second.cookie) {
      ++it;
      continue;
    }
    admission_.Remove(it->second.peer);
    active_.erase(it++);
  }
}

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Bind(
    const std::string& listen, ConnectionGateOptions options) {
  auto fail = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", listen, ": ", why));
  };
  absl::StatusOr<Address> address = ParseListenAddress(listen);
  if (!address.ok()) {
    return fail(address.status().message());
  }
  absl::StatusOr<Targets> targets = Resolve(*address);
  if (!targets.ok()) {
    return fail(targets.status().message());
  }
  auto gate = std::unique_ptr<ConnectionGate>(new ConnectionGate());
  int port = address->port;
  for (size_t i = 0; i < targets->addrs.size(); ++i) {
    if (targets->wildcard && !gate->listeners_.empty()) {
      break;  // [::] takes both families
    }
    auto [ss, len] = targets->addrs[i];
    SetPort(&ss, port);
    int error = 0;
    absl::StatusOr<int> fd = Listen(reinterpret_cast<const sockaddr*>(&ss), len,
                                    targets->wildcard, &error);
    if (!fd.ok()) {
      // An address family the host lacks is skipped (the wildcard falls
      // back to 0.0.0.0); anything else, a port in use above all, fails.
      const bool missing_family = error == EAFNOSUPPORT ||
                                  error == EADDRNOTAVAIL ||
                                  error == EPROTONOSUPPORT;
      if (!missing_family || i + 1 == targets->addrs.size()) {
        if (gate->listeners_.empty() || !missing_family) {
          return fail(fd.status().message());
        }
      }
      continue;
    }
    gate->listeners_.push_back(*fd);
    if (port == 0) {
      port = BoundPort(*fd);
    }
  }
  if (gate->listeners_.empty()) {
    return fail("no address bound");
  }
  gate->port_ = port;
  gate->wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  gate->loop_options_ = options;
  return gate;
}

void ConnectionGate::Start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  if (loop_options_.relay.has_value()) {
    GuardedRelayOptions relay = *loop_options_.relay;
    relay.metrics = loop_options_.metrics;
    relay_ = GuardedRelay::Start(std::move(relay));
  }
  loop_ = std::make_unique<Loop>(listeners_, wake_, loop_options_,
                                 std::move(acceptor), relay_.get());
  thread_ = std::thread([loop = loop_.get()] {
    NameThisThread("aside-gate");
    loop->Run();
  });
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
    thread_.join();
  }
  loop_.reset();
  for (int fd : listeners_) {
    close(fd);
  }
  listeners_.clear();
  if (wake_ >= 0) {
    close(wake_);
    wake_ = -1;
  }
}

ConnectionGate::~ConnectionGate() {
  Stop();
  relay_.reset();
}

ConnectionBudget ConnectionBudgetFor(uint32_t configured, uint64_t file_limit,
                                     uint32_t descriptors_per_connection) {
  const uint64_t reserve = std::max<uint64_t>(64, file_limit / 8);
  const uint64_t budget = std::clamp<uint64_t>(
      (file_limit > reserve ? file_limit - reserve : 1) /
          std::max<uint32_t>(1, descriptors_per_connection),
      1, UINT32_MAX);
  if (configured == 0) {
    return {.max_connections = static_cast<uint32_t>(budget)};
  }
  if (configured > budget) {
    return {.max_connections = static_cast<uint32_t>(budget), .lowered = true};
  }
  return {.max_connections = configured};
}

}  // namespace aside::server
