// The HTTP server's request handling, driven in process: each input is the
// bytes one client sends on a fresh loopback connection before closing its
// side; the server must answer or close, and keep serving. A well-formed
// request after every input checks that it does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/net/http_server.h"

namespace {

int Port() {
  static const int port = [] {
    aside::server::HttpServerOptions options;
    options.header_timeout = absl::Seconds(2);
    // Kept for the life of the process (reachable: no leak report).
    static auto* server = new aside::server::HttpServer(options);
    server->Route("/metrics", [](const aside::server::HttpRequest& r) {
      aside::server::HttpResponse out;
      out.body = std::string(r.query);
      return out;
    });
    absl::StatusOr<int> p = server->Start("127.0.0.1:0");
    if (!p.ok()) {
      std::abort();
    }
    return *p;
  }();
  return port;
}

// Sends `bytes`, half-closes, and returns what came back (bounded wait).
std::string Exchange(const uint8_t* bytes, size_t size) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    std::abort();
  }
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(Port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::abort();
  }
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, bytes + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      break;  // the server closed early (e.g. headers too large)
    }
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      break;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)Exchange(data, size);
  static constexpr char kProbe[] = "GET /metrics?alive HTTP/1.1\r\n\r\n";
  const std::string reply =
      Exchange(reinterpret_cast<const uint8_t*>(kProbe), sizeof(kProbe) - 1);
  if (reply.find("alive") == std::string::npos) {
    __builtin_trap();  // the server stopped serving
  }
  return 0;
}
