#include "tests/http/raw_client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aside::testing {
namespace {

// Fills `addr` from an IPv4 or IPv6 literal.
bool ToSockaddr(const std::string& ip, int port, sockaddr_storage* addr,
                socklen_t* len) {
  std::memset(addr, 0, sizeof(*addr));
  auto* v4 = reinterpret_cast<sockaddr_in*>(addr);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(addr);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

int64_t RemainingMs(absl::Time deadline) {
  return std::max<int64_t>(0,
                           absl::ToInt64Milliseconds(deadline - absl::Now()));
}

}  // namespace

RawConnection& RawConnection::operator=(RawConnection&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.release();
    pending_ = std::move(other.pending_);
  }
  return *this;
}

void RawConnection::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

absl::StatusOr<RawConnection> RawConnection::Connect(
    const std::string& host, int port, const std::string& source) {
  sockaddr_storage to;
  socklen_t to_len = 0;
  if (!ToSockaddr(host, port, &to, &to_len)) {
    return absl::InvalidArgumentError(absl::StrCat("bad host ", host));
  }
  RawConnection conn(::socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (conn.fd() < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  if (!source.empty()) {
    sockaddr_storage from;
    socklen_t from_len = 0;
    if (!ToSockaddr(source, 0, &from, &from_len)) {
      return absl::InvalidArgumentError(absl::StrCat("bad source ", source));
    }
    if (::bind(conn.fd(), reinterpret_cast<sockaddr*>(&from), from_len) != 0) {
      return absl::InternalError(
          absl::StrCat("bind ", source, ": ", std::strerror(errno)));
    }
  }
  if (::connect(conn.fd(), reinterpret_cast<sockaddr*>(&to), to_len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect: ", std::strerror(errno)));
  }
  return conn;
}

absl::Status RawConnection::Send(absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return absl::UnavailableError(
          absl::StrCat("send: ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RawConnection::ReadUntilClosed(
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    int ready = ::poll(&p, 1, static_cast<int>(RemainingMs(deadline)));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("still open after ", absl::FormatDuration(timeout),
                       " (read ", out.size(), " bytes)"));
    }
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      return out;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      return absl::UnavailableError(
          absl::StrCat("recv: ", std::strerror(errno)));
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

bool RawConnection::PeerOpen() {
  char c;
  ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) {
    return true;
  }
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

absl::StatusOr<RawResponse> ReadResponse(RawConnection& conn,
                                         absl::Duration timeout, bool head) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string data = std::move(conn.pending());
  conn.pending().clear();
  size_t header_end = std::string::npos;
  RawResponse out;
  size_t want = 0;
  char buf[8192];
  for (;;) {
    if (header_end == std::string::npos) {
      header_end = data.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        std::vector<std::string> lines =
            absl::StrSplit(data.substr(0, header_end), "\r\n");
        std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
        if (first.size() < 2 || !absl::SimpleAtoi(first[1], &out.status)) {
          return absl::InternalError(
              absl::StrCat("bad status line: ", lines[0]));
        }
        for (size_t i = 1; i < lines.size(); ++i) {
          const size_t colon = lines[i].find(':');
          if (colon == std::string::npos) {
            return absl::InternalError(
                absl::StrCat("bad header line: ", lines[i]));
          }
          out.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
              std::string(absl::StripAsciiWhitespace(
                  absl::string_view(lines[i]).substr(colon + 1)));
        }
        if (!head) {
          auto it = out.headers.find("content-length");
          if (it != out.headers.end() && !absl::SimpleAtoi(it->second, &want)) {
            return absl::InternalError("bad content-length");
          }
        }
      }
    }
    if (header_end != std::string::npos &&
        data.size() >= header_end + 4 + want) {
      out.body = data.substr(header_end + 4, want);
      conn.pending() = data.substr(header_end + 4 + want);
      return out;
    }
    pollfd p{.fd = conn.fd(), .events = POLLIN, .revents = 0};
    int ready = ::poll(&p, 1, static_cast<int>(RemainingMs(deadline)));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no complete response after ", absl::FormatDuration(timeout),
          " (read ", data.size(), " bytes)"));
    }
    ssize_t n = ::recv(conn.fd(), buf, sizeof(buf), 0);
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("closed after ", data.size(), " bytes"));
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      return absl::UnavailableError(
          absl::StrCat("recv: ", std::strerror(errno)));
    }
    data.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<RawResponse> RawGet(const std::string& host, int port,
                                   const std::string& target,
                                   const std::string& source,
                                   absl::Duration timeout) {
  absl::StatusOr<RawConnection> conn =
      RawConnection::Connect(host, port, source);
  if (!conn.ok()) {
    return conn.status();
  }
  absl::Status sent = conn->Send(absl::StrCat(
      "GET ", target, " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"));
  if (!sent.ok()) {
    return sent;
  }
  return ReadResponse(*conn, timeout);
}

int CountOpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    return -1;
  }
  int count = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') {
      ++count;
    }
  }
  ::closedir(dir);
  return count - 1;  // the directory's own descriptor
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) {
      return done();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void Trickler::Stop() {
  {
    aside::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Trickler::Run(absl::Duration interval) {
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: ";
  size_t i = 0;
  aside::MutexLock lock(&mu_);
  while (!stop_) {
    const char c = i < request.size() ? request[i] : 'a';
    ++i;
    for (RawConnection* conn : conns_) {
      (void)conn->Send(absl::string_view(&c, 1));
    }
    sent_.fetch_add(1);
    mu_.AwaitWithTimeout(aside::Cond(&stop_), interval);
  }
}

}  // namespace aside::testing
