#include "server/net/guarded_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/sync.h"
#include "lib/thread_name.h"
#include "server/base/client_peer.h"
#include "server/net/peer_admission.h"

namespace aside::server {
namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr int kReadsPerEvent = 8;
// How long a connection gRPC has closed may take to send its last bytes.
constexpr auto kCloseGrace = std::chrono::seconds(1);
// A drained buffer that grew past this gives its memory back.
constexpr size_t kKeptCapacity = 64 << 10;

void Trim(std::string* buffer) {
  if (buffer->empty() && buffer->capacity() > kKeptCapacity) {
    std::string().swap(*buffer);
  }
}

}  // namespace

std::string GrpcPeerString(const sockaddr* addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(a->sin_port));
  }
  if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof(text));
      return absl::StrCat("ipv4:", text, ":", ntohs(a->sin6_port));
    }
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    std::string scope =
        a->sin6_scope_id == 0 ? "" : absl::StrCat("%", a->sin6_scope_id);
    return absl::StrCat("ipv6:[", text, scope, "]:", ntohs(a->sin6_port));
  }
  return "unknown";
}

// One relay thread: its connections, its epoll set, and a queue of
// connections adopted for it.
class GuardedRelay::Worker {
 public:
  Worker(const GuardedRelayOptions& options, prometheus::Counter& refused,
         prometheus::Counter& reset_floods,
         prometheus::Counter& peer_streams_refused,
         prometheus::Counter& all_streams_refused)
      : options_(options),
        refused_(refused),
        reset_floods_(reset_floods),
        peer_streams_refused_(peer_streams_refused),
        all_streams_refused_(all_streams_refused) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
  }
  ~Worker() {
    for (Conn* c : conns_) {
      CloseConn(c);
      delete c;
    }
    aside::MutexLock lock(&mu_);
    for (const Incoming& in : incoming_) {
      close(in.client);
      close(in.server);
    }
    close(wake_);
    close(epoll_);
  }

  void Post(int client, int server, PeerShares shares) {
    {
      aside::MutexLock lock(&mu_);
      incoming_.push_back({client, server, std::move(shares)});
    }
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
  }
  void RequestStop() {
    {
      aside::MutexLock lock(&mu_);
      stop_ = true;
    }
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
  }
  void Run();

 private:
  struct Conn;
  // An epoll registration: which connection, and which of its sockets.
  struct End {
    Conn* conn;
    bool client;
  };
  struct Conn {
    Conn(const H2RequestGuardOptions& options, PeerShares shares)
        : guard(options, std::move(shares.resets), std::move(shares.streams),
                std::move(shares.all_streams)) {}
    int client = -1;
    int server = -1;
    End ends[2];
    uint32_t client_mask = 0;
    uint32_t server_mask = 0;
    H2RequestGuard guard;
    std::string to_server;
    std::string to_client;
    uint64_t refused_counted = 0;
    uint64_t peer_streams_counted = 0;
    uint64_t all_streams_counted = 0;
    bool client_eof = false;
    bool server_eof = false;
    bool server_write_shut = false;
    bool client_write_shut = false;
    bool closing = false;  // in closing_, until close_by
    std::chrono::steady_clock::time_point close_by{};
    bool dead = false;
  };

  void TakeIncoming();
  void OnEvent(End* end, uint32_t events);
  // Reads what `fd` has (up to the high-water mark of `sink`); false on an
  // error or end of stream (`*eof` says which).
  bool ReadSide(Conn* c, bool client, bool* eof);
  // Reads and drops what `fd` has; false on an error.
  bool Discard(int fd, bool* eof);
  // Writes what `buffer` holds to `fd`; false on an error.
  static bool Flush(int fd, std::string* buffer);
  void Rearm(Conn* c);
  static void CloseConn(Conn* c) {
    if (c->client >= 0) {
      close(c->client);
      c->client = -1;
    }
    if (c->server >= 0) {
      close(c->server);
      c->server = -1;
    }
  }

  const GuardedRelayOptions& options_;
  prometheus::Counter& refused_;
  prometheus::Counter& reset_floods_;
  prometheus::Counter& peer_streams_refused_;
  prometheus::Counter& all_streams_refused_;
  int epoll_ = -1;
  int wake_ = -1;
  absl::flat_hash_set<Conn*> conns_;
  std::vector<Conn*> dead_;
  // Connections gRPC has closed, waiting for their last bytes to go out,
  // in close_by order (one grace for all).
  std::deque<Conn*> closing_;
  char chunk_[kReadChunk];

  aside::Mutex mu_;
  struct Incoming {
    int client;
    int server;
    PeerShares shares;
  };
  std::vector<Incoming> incoming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

void GuardedRelay::Worker::Run() {
  epoll_event events[128];
  for (;;) {
    int wait_ms = -1;
    if (!closing_.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          closing_.front()->close_by - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    const int n = epoll_wait(epoll_, events, 128, wait_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t count = 0;
        (void)!read(wake_, &count, sizeof(count));
        {
          aside::MutexLock lock(&mu_);
          if (stop_) {
            return;
          }
        }
        TakeIncoming();
        continue;
      }
      End* end = static_cast<End*>(events[i].data.ptr);
      if (!end->conn->dead) {
        OnEvent(end, events[i].events);
      }
    }
    // gRPC is done with these; what it sent last had its grace to reach
    // the client.
    const auto now = std::chrono::steady_clock::now();
    while (!closing_.empty() &&
           (closing_.front()->dead || closing_.front()->close_by <= now)) {
      Conn* c = closing_.front();
      closing_.pop_front();
      c->closing = false;
      c->dead = true;
      dead_.push_back(c);  // deleted below (listed twice if it died before)
    }
    std::sort(dead_.begin(), dead_.end());
    dead_.erase(std::unique(dead_.begin(), dead_.end()), dead_.end());
    for (Conn* c : dead_) {
      if (c->closing) {
        CloseConn(c);  // still listed in closing_: freed when it leaves
        continue;
      }
      conns_.erase(c);
      CloseConn(c);  // also leaves the epoll set
      delete c;
    }
    dead_.clear();
  }
}

void GuardedRelay::Worker::TakeIncoming() {
  std::vector<Incoming> taken;
  {
    aside::MutexLock lock(&mu_);
    taken.swap(incoming_);
  }
  for (Incoming& in : taken) {
    auto* c = new Conn(options_.guard, std::move(in.shares));
    c->client = in.client;
    c->server = in.server;
    c->ends[0] = {c, true};
    c->ends[1] = {c, false};
    conns_.insert(c);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c->ends[0];
    epoll_ctl(epoll_, EPOLL_CTL_ADD, c->client, &ev);
    ev.data.ptr = &c->ends[1];
    epoll_ctl(epoll_, EPOLL_CTL_ADD, c->server, &ev);
    c->client_mask = c->server_mask = EPOLLIN;
  }
}

bool GuardedRelay::Worker::ReadSide(Conn* c, bool client, bool* eof) {
  std::string& sink = client ? c->to_server : c->to_client;
  const int fd = client ? c->client : c->server;
  for (int i = 0; i < kReadsPerEvent && sink.size() < kHighWater; ++i) {
    const ssize_t got = read(fd, chunk_, sizeof(chunk_));
    if (got > 0) {
      const std::string_view bytes(chunk_, static_cast<size_t>(got));
      if (client) {
        c->guard.FromClient(bytes, &c->to_server, &c->to_client);
      } else {
        c->guard.FromServer(bytes, &c->to_client);
      }
      if (static_cast<size_t>(got) < sizeof(chunk_)) {
        return true;
      }
      continue;
    }
    if (got == 0) {
      *eof = true;
      return false;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

bool GuardedRelay::Worker::Flush(int fd, std::string* buffer) {
  if (fd < 0) {
    return true;
  }
  size_t sent = 0;
  while (sent < buffer->size()) {
    const ssize_t n =
        send(fd, buffer->data() + sent, buffer->size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    }
    return false;
  }
  buffer->erase(0, sent);
  Trim(buffer);
  return true;
}

void GuardedRelay::Worker::OnEvent(End* end, uint32_t events) {
  Conn* c = end->conn;
  bool ok = true;
  const bool gone = !end->client && c->server < 0;  // closed in this round
  if (!gone && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    bool eof = false;
    if (end->client && c->server_eof) {
      ok = Discard(c->client, &eof);  // gRPC is gone: nothing goes on
      c->client_eof = c->client_eof || eof;
    } else if (!ReadSide(c, end->client, &eof)) {
      if (end->client) {
        // The client done sending: gRPC learns it once its bytes are in.
        ok = eof;
        c->client_eof = eof;
      } else {
        // gRPC done (an end of stream or a reset alike): the client gets
        // what gRPC sent, its GOAWAY above all, then an end of stream.
        c->server_eof = true;
        close(c->server);  // so that its hang-up stops reporting
        c->server = -1;
        c->to_server.clear();
      }
    }
  }
  // Whatever arrived goes on at once; what does not fit waits for EPOLLOUT.
  ok = Flush(c->server, &c->to_server) && ok;
  ok = Flush(c->client, &c->to_client) && ok;
  if (const uint64_t refused = c->guard.refused();
      refused > c->refused_counted) {
    refused_.Increment(static_cast<double>(refused - c->refused_counted));
    c->refused_counted = refused;
  }
  if (const uint64_t refused = c->guard.refused_peer_streams();
      refused > c->peer_streams_counted) {
    peer_streams_refused_.Increment(
        static_cast<double>(refused - c->peer_streams_counted));
    c->peer_streams_counted = refused;
  }
  if (const uint64_t refused = c->guard.refused_all_streams();
      refused > c->all_streams_counted) {
    all_streams_refused_.Increment(
        static_cast<double>(refused - c->all_streams_counted));
    c->all_streams_counted = refused;
  }
  if (ok && c->client_eof && c->to_server.empty() && !c->server_write_shut &&
      c->server >= 0) {
    shutdown(c->server, SHUT_WR);
    c->server_write_shut = true;
  }
  if (ok && c->server_eof && c->to_client.empty() && !c->client_write_shut) {
    // A FIN after gRPC's last bytes, not a reset that could discard them
    // at the client; what the client still sends is read and dropped.
    shutdown(c->client, SHUT_WR);
    c->client_write_shut = true;
  }
  if (c->guard.reset_budget_spent() && !c->dead) {
    reset_floods_.Increment();
  }
  if (!ok || c->guard.failed() || (c->server_eof && c->client_eof)) {
    c->dead = true;
    dead_.push_back(c);
    return;
  }
  if (c->server_eof && !c->closing) {
    // The client gets kCloseGrace to take gRPC's last bytes and close; one
    // that does not is closed then.
    c->closing = true;
    c->close_by = std::chrono::steady_clock::now() + kCloseGrace;
    closing_.push_back(c);
  }
  Rearm(c);
}

bool GuardedRelay::Worker::Discard(int fd, bool* eof) {
  for (int i = 0; i < kReadsPerEvent; ++i) {
    const ssize_t got = read(fd, chunk_, sizeof(chunk_));
    if (got > 0) {
      continue;
    }
    if (got == 0) {
      *eof = true;
      return true;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

void GuardedRelay::Worker::Rearm(Conn* c) {
  const uint32_t client_mask =
      (!c->client_eof && (c->server_eof || c->to_server.size() < kHighWater)
           ? EPOLLIN
           : 0u) |
      (c->to_client.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  const uint32_t server_mask =
      (!c->server_eof && c->to_client.size() < kHighWater ? EPOLLIN : 0u) |
      (c->to_server.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  if (client_mask != c->client_mask) {
    epoll_event ev{};
    ev.events = client_mask;
    ev.data.ptr = &c->ends[0];
    epoll_ctl(epoll_, EPOLL_CTL_MOD, c->client, &ev);
    c->client_mask = client_mask;
  }
  if (c->server >= 0 && server_mask != c->server_mask) {
    epoll_event ev{};
    ev.events = server_mask;
    ev.data.ptr = &c->ends[1];
    epoll_ctl(epoll_, EPOLL_CTL_MOD, c->server, &ev);
    c->server_mask = server_mask;
  }
}

std::unique_ptr<GuardedRelay> GuardedRelay::Start(GuardedRelayOptions options) {
  auto relay = std::unique_ptr<GuardedRelay>(new GuardedRelay());
  relay->options_ = std::move(options);
  // Labelled like every other limit: the key without "limits.".
  auto counter = [&](absl::string_view key) -> prometheus::Counter& {
    return relay->options_.metrics->limit_refused.Add(
        {{"limit", std::string(absl::StripPrefix(key, "limits."))}});
  };
  prometheus::Counter& refused = counter(relay->options_.guard.limit_name);
  prometheus::Counter& reset_floods =
      counter(relay->options_.guard.resets_limit_name);
  prometheus::Counter& peer_streams_refused =
      counter(relay->options_.guard.peer_streams_limit_name);
  prometheus::Counter& all_streams_refused =
      counter(relay->options_.guard.all_streams_limit_name);
  if (relay->options_.max_streams != 0) {
    relay->all_streams_ =
        std::make_shared<StreamCount>(relay->options_.max_streams);
  }
  const int threads = std::max(1, relay->options_.threads);
  for (int i = 0; i < threads; ++i) {
    relay->workers_.push_back(
        std::make_unique<Worker>(relay->options_, refused, reset_floods,
                                 peer_streams_refused, all_streams_refused));
  }
  for (auto& worker : relay->workers_) {
    relay->threads_.emplace_back([w = worker.get()] {
      NameThisThread("aside-relay");
      w->Run();
    });
  }
  return relay;
}

GuardedRelay::~GuardedRelay() {
  for (auto& worker : workers_) {
    worker->RequestStop();
  }
  for (std::thread& t : threads_) {
    t.join();
  }
  workers_.clear();
}

PeerShares GuardedRelay::SharesFor(const sockaddr* addr, socklen_t len) {
  PeerShares shares{.all_streams = all_streams_};
  const H2RequestGuardOptions& guard = options_.guard;
  if (!options_.resets_per_peer) {
    return shares;  // the connection's own reset budget, no peers
  }
  std::string peer = PeerKey(addr, len);
  if (peer.empty()) {
    return shares;
  }
  const auto now = ResetBucket::Clock::now();
  if (peers_.size() >= peers_swept_at_) {
    // What no connection holds and is back at its start (a bucket that
    // refilled, no stream open) is the same as new: forget it.
    absl::erase_if(peers_, [now](const auto& entry) {
      const PeerShares& s = entry.second;
      return (s.resets == nullptr ||
              (s.resets.use_count() == 1 && s.resets->FullAt(now))) &&
             (s.streams == nullptr ||
              (s.streams.use_count() == 1 && s.streams->open() == 0));
    });
    peers_swept_at_ = std::max<size_t>(1024, 2 * peers_.size());
  }
  PeerShares& kept = peers_[std::move(peer)];
  if (kept.resets == nullptr && guard.max_resets != 0) {
    kept.resets = std::make_shared<ResetBucket>(guard.max_resets,
                                                guard.resets_per_second);
  }
  if (kept.streams == nullptr && options_.max_streams_per_peer != 0) {
    kept.streams = std::make_shared<StreamCount>(options_.max_streams_per_peer);
  }
  shares.resets = kept.resets;
  shares.streams = kept.streams;
  return shares;
}

int GuardedRelay::Adopt(int client, const sockaddr* addr, socklen_t len) {
  // The system call itself, not libc's wrapper: gRPC closes its end inside
  // its own (uninstrumented) library, which ThreadSanitizer cannot see, so
  // a pair it had seen created would make the number's next user on any
  // thread look like a race to it. Everything else is the same call.
  int pair[2];
  if (syscall(SYS_socketpair, AF_UNIX,
              SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    return -1;
  }
  // The name gRPC reads as the peer: unique in the network namespace
  // (pid, port, sequence), then the client's address.
  const std::string name =
      absl::StrCat(kRelayNamePrefix, getpid(), "/", options_.tag, "/",
                   ++next_seq_, "/", GrpcPeerString(addr, len));
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(un.sun_path) - 1);
  std::memcpy(un.sun_path + 1, name.data(), n);
  const auto un_len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  // Without the name gRPC would see an anonymous peer; the call still works.
  (void)bind(pair[0], reinterpret_cast<const sockaddr*>(&un), un_len);
  workers_[next_worker_]->Post(client, pair[0], SharesFor(addr, len));
  next_worker_ = (next_worker_ + 1) % workers_.size();
  return pair[1];
}

}  // namespace aside::server
