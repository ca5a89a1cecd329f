#include "tests/discovery/dns_test_servers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aside::testing {

// ---------------------------------------------------------------- Dnsmasq

absl::StatusOr<std::unique_ptr<Dnsmasq>> Dnsmasq::Start(Options options) {
  std::unique_ptr<Dnsmasq> dnsmasq(new Dnsmasq());
  dnsmasq->options_ = std::move(options);
  dnsmasq->hosts_path_ =
      dnsmasq->dir_.WriteFile("hosts", dnsmasq->options_.hosts);
  absl::Status last;
  // A free port can be taken between PickUnusedPort and dnsmasq's bind.
  for (int attempt = 0; attempt < 5; ++attempt) {
    dnsmasq->port_ = PickUnusedPort();
    last = dnsmasq->Launch();
    if (last.ok()) {
      return dnsmasq;
    }
  }
  return last;
}

Dnsmasq::~Dnsmasq() { (void)Stop(); }

absl::Status Dnsmasq::Launch() {
  std::vector<std::string> argv = {
      "/usr/sbin/dnsmasq",
      // Foreground, and keeps the user id (no privilege drop).
      "--no-daemon",
      "--conf-file=/dev/null",
      absl::StrCat("--port=", port_),
      absl::StrCat("--listen-address=", options_.listen_address),
      "--bind-interfaces",
      "--no-resolv",
      "--no-hosts",
      "--local=/test/",
      absl::StrCat("--addn-hosts=", hosts_path_),
      absl::StrCat("--pid-file=", dir_.path(), "/dnsmasq.pid"),
      "--log-facility=-",
  };
  // If the test process dies without running destructors (an abort, a
  // sanitizer report), dnsmasq dies with it. setpriv (util-linux) execs
  // dnsmasq in place, so the pid is still the one to signal.
  if (access("/usr/bin/setpriv", X_OK) == 0) {
    argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL"});
  }
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(argv);
  if (!process.ok()) {
    return process.status();
  }
  process_ = *std::move(process);
  // The hosts file is read after the sockets are bound.
  absl::StatusOr<std::string> line = process_->WaitForLine(
      absl::StrCat("read ", hosts_path_, " - "), absl::Seconds(10));
  if (!line.ok()) {
    process_.reset();
    return line.status();
  }
  return absl::OkStatus();
}

absl::Status Dnsmasq::SetHosts(const std::string& hosts) {
  if (process_ == nullptr) {
    return absl::FailedPreconditionError("dnsmasq is not running");
  }
  options_.hosts = hosts;
  dir_.WriteFile("hosts", hosts);
  process_->Signal(SIGHUP);
  return process_
      ->WaitForLine(absl::StrCat("read ", hosts_path_, " - "),
                    absl::Seconds(10))
      .status();
}

absl::Status Dnsmasq::Stop() {
  if (process_ == nullptr) {
    return absl::OkStatus();
  }
  process_->Signal(SIGTERM);
  const bool exited = process_->Wait(absl::Seconds(10)).has_value();
  process_.reset();  // SIGKILLs it if it did not exit
  return exited ? absl::OkStatus()
                : absl::DeadlineExceededError("dnsmasq did not exit");
}

absl::Status Dnsmasq::Restart(std::vector<std::string> args) {
  if (absl::Status stopped = Stop(); !stopped.ok()) {
    return stopped;
  }
  options_.args = std::move(args);
  return Launch();
}

std::string Dnsmasq::server() const {
  if (options_.listen_address.find(':') != std::string::npos) {
    return absl::StrCat("[", options_.listen_address, "]:", port_);
  }
  return absl::StrCat(options_.listen_address, ":", port_);
}

// ---------------------------------------------------------- FakeDnsServer

namespace {

// The question of a query: lower-case name, type, and where it ends.
bool ParseQuestion(const std::vector<uint8_t>& packet, std::string& name,
                   int& qtype, size_t& end) {
  if (packet.size() < 12 || packet[4] != 0 || packet[5] != 1) {
    return false;
  }
  size_t pos = 12;
  name.clear();
  while (pos < packet.size()) {
    const size_t len = packet[pos++];
    if (len == 0) {
      break;
    }
    if (len > 63 || pos + len > packet.size()) {
      return false;
    }
    if (!name.empty()) {
      name += '.';
    }
    for (size_t i = 0; i < len; ++i) {
      name += static_cast<char>(
          std::tolower(static_cast<unsigned char>(packet[pos + i])));
    }
    pos += len;
  }
  if (pos + 4 > packet.size()) {
    return false;
  }
  qtype = packet[pos] << 8 | packet[pos + 1];
  end = pos + 4;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeDnsServer>> FakeDnsServer::Start(
    Handler handler) {
  std::unique_ptr<FakeDnsServer> server(new FakeDnsServer());
  server->handler_ = std::move(handler);
  server->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  server->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->fd_ < 0 || server->stop_fd_ < 0) {
    return absl::InternalError("fake dns: socket/eventfd failed");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(server->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0 ||
      getsockname(server->fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError("fake dns: bind failed");
  }
  server->port_ = ntohs(addr.sin_port);
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

FakeDnsServer::~FakeDnsServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
  }
  if (stop_fd_ >= 0) {
    close(stop_fd_);
  }
}

std::string FakeDnsServer::server() const {
  return absl::StrCat("127.0.0.1:", port_);
}

int FakeDnsServer::queries() const {
  MutexLock lock(&mu_);
  return queries_;
}

absl::Status FakeDnsServer::WaitForHeld(int count, absl::Duration timeout) {
  MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(
          [&] {
            mu_.AssertHeld();
            return static_cast<int>(held_.size()) >= count;
          },
          timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "fake dns: ", held_.size(), " of ", count, " queries held"));
  }
  return absl::OkStatus();
}

void FakeDnsServer::ReleaseHeld(const Answer& answer) {
  std::vector<Held> held;
  {
    MutexLock lock(&mu_);
    held.swap(held_);
  }
  for (const Held& h : held) {
    Send(h.query, h.peer, h.qtype, answer);
  }
}

void FakeDnsServer::Run() {
  while (true) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      continue;
    }
    if (fds[1].revents != 0) {
      return;
    }
    if (fds[0].revents == 0) {
      continue;
    }
    std::vector<uint8_t> packet(4096);
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const ssize_t n = recvfrom(fd_, packet.data(), packet.size(), 0,
                               reinterpret_cast<sockaddr*>(&peer), &peer_len);
    if (n <= 0) {
      continue;
    }
    packet.resize(static_cast<size_t>(n));
    std::string name;
    int qtype = 0;
    size_t end = 0;
    if (!ParseQuestion(packet, name, qtype, end)) {
      continue;
    }
    packet.resize(end);  // drop any EDNS OPT record
    std::vector<uint8_t> peer_bytes(
        reinterpret_cast<uint8_t*>(&peer),
        reinterpret_cast<uint8_t*>(&peer) + peer_len);
    const Answer answer = handler_(name, qtype);
    {
      MutexLock lock(&mu_);
      ++queries_;
      if (answer.kind == Answer::Kind::kHold) {
        held_.push_back({packet, peer_bytes, name, qtype});
        continue;
      }
    }
    if (answer.kind == Answer::Kind::kReply) {
      Send(packet, peer_bytes, qtype, answer);
    }
  }
}

void FakeDnsServer::Send(const std::vector<uint8_t>& query,
                         const std::vector<uint8_t>& peer, int qtype,
                         const Answer& answer) {
  std::vector<uint8_t> out = query;
  out[2] = static_cast<uint8_t>(0x80 | (query[2] & 0x79) | 0x04);  // QR AA
  out[3] = static_cast<uint8_t>(0x80 | (answer.rcode & 0x0f));     // RA
  out[8] = out[9] = out[10] = out[11] = 0;  // no authority, no additional
  uint16_t count = 0;
  // One record of the question's name and type, TTL 0.
  auto add_record = [&](const std::vector<uint8_t>& rdata) {
    const uint8_t head[] = {0xc0,
                            0x0c,  // name: the question's
                            0,
                            static_cast<uint8_t>(qtype),
                            0,
                            1,  // IN
                            0,
                            0,
                            0,
                            0,  // TTL 0
                            static_cast<uint8_t>(rdata.size() >> 8),
                            static_cast<uint8_t>(rdata.size() & 0xff)};
    out.insert(out.end(), std::begin(head), std::end(head));
    out.insert(out.end(), rdata.begin(), rdata.end());
    ++count;
  };
  if (answer.rcode == 0) {
    for (const std::string& address : answer.addresses) {
      uint8_t rdata[16];
      size_t rdlen = 0;
      if (qtype == 1 && inet_pton(AF_INET, address.c_str(), rdata) == 1) {
        rdlen = 4;
      } else if (qtype == 28 &&
                 inet_pton(AF_INET6, address.c_str(), rdata) == 1) {
        rdlen = 16;
      } else {
        continue;
      }
      add_record(std::vector<uint8_t>(rdata, rdata + rdlen));
    }
    for (const Answer::Srv& srv : answer.srv) {
      if (qtype != 33) {
        continue;
      }
      // Priority 0, weight 0, port, then the target as labels.
      std::vector<uint8_t> rdata = {0,
                                    0,
                                    0,
                                    0,
                                    static_cast<uint8_t>(srv.port >> 8),
                                    static_cast<uint8_t>(srv.port & 0xff)};
      for (absl::string_view label :
           absl::StrSplit(srv.target, '.', absl::SkipEmpty())) {
        rdata.push_back(static_cast<uint8_t>(label.size()));
        rdata.insert(rdata.end(), label.begin(), label.end());
      }
      rdata.push_back(0);
      add_record(rdata);
    }
  }
  out[6] = static_cast<uint8_t>(count >> 8);
  out[7] = static_cast<uint8_t>(count & 0xff);
  sendto(fd_, out.data(), out.size(), 0,
         reinterpret_cast<const sockaddr*>(peer.data()),
         static_cast<socklen_t>(peer.size()));
}

}  // namespace aside::testing
