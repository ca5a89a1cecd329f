// HttpServer on real loopback sockets: routing, keep-alive, the bounds of
// server/net/http_server.h (deadlines, sizes, caps), accept recovery,
// prompt stop and descriptor hygiene. Deadlines are test-sized (300 ms);
// every wait is bounded.
#include "server/net/http_server.h"

#include <netinet/in.h>
#include <prometheus/registry.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/sync.h"
#include "tests/http/metric_value.h"
#include "tests/http/raw_client.h"

namespace aside::server {
namespace {

using ::aside::testing::CountOpenFds;
using ::aside::testing::MetricValue;
using ::aside::testing::RawConnection;
using ::aside::testing::RawGet;
using ::aside::testing::ReadResponse;
using ::aside::testing::Trickler;
using ::aside::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kLocal[] = "127.0.0.1";
constexpr absl::Duration kShort = absl::Milliseconds(300);

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = {},
             const std::string& address = "127.0.0.1:0") {
    options.registry = &registry_;
    server_ = std::make_unique<HttpServer>(std::move(options));
    server_->Route("/hello", [](const HttpRequest&) {
      return HttpResponse{.body = "hello\n"};
    });
    server_->Route("/echo", [](const HttpRequest& r) {
      return HttpResponse{
          .status = 202,
          .content_type = "application/json",
          .body = absl::StrCat(r.method, " ", r.path, " ", r.query, " ",
                               r.Header("x-test"), " ", r.target),
          .headers = {{"Cache-Control", "no-store"}}};
    });
    server_->Route("/big", [this](const HttpRequest&) {
      return HttpResponse{.body = std::string(big_body_bytes_, 'x')};
    });
    absl::StatusOr<int> port = server_->Start(address);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }

  RawConnection Connect(const std::string& source = "") {
    absl::StatusOr<RawConnection> conn =
        RawConnection::Connect(kLocal, port_, source);
    EXPECT_TRUE(conn.ok()) << conn.status();
    return conn.ok() ? *std::move(conn) : RawConnection();
  }

  double Metric(const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
    return MetricValue(registry_, name, labels);
  }

  prometheus::Registry registry_;
  size_t big_body_bytes_ = 0;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, UnknownPathIs404OtherMethodsAre405) {
  Start();
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /nope HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  auto res = ReadResponse(conn, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 404);

  // Same connection: errors without a body keep it alive.
  ASSERT_TRUE(conn.Send("DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  res = ReadResponse(conn, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->headers["allow"], "GET, HEAD");

  EXPECT_EQ(
      Metric("aside_http_requests_total", {{"path", "other"}, {"code", "404"}}),
      1);
  EXPECT_EQ(Metric("aside_http_requests_total",
                   {{"path", "/hello"}, {"code", "405"}}),
            1);
}

TEST_F(HttpServerTest, HeadGetsHeadersWithoutBody) {
  Start();
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n"
                        "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
                  .ok());
  auto head = ReadResponse(conn, absl::Seconds(5), /*head=*/true);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-length"], "6");
  // The next bytes on the connection are the GET's response, so HEAD sent
  // no body.
  auto get = ReadResponse(conn, absl::Seconds(5));
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, "hello\n");
}

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  Start();
  RawConnection conn = Connect();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(conn.Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
    auto res = ReadResponse(conn, absl::Seconds(5));
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "hello\n");
    EXPECT_EQ(res->headers.count("connection"), 0u);  // 1.1 default
  }
  EXPECT_EQ(Metric("aside_http_connections_accepted_total"), 1);
  EXPECT_EQ(server_->open_connections(), 1u);

  // HTTP/1.0 without keep-alive: answered, then closed.
  RawConnection old = Connect();
  ASSERT_TRUE(old.Send("GET /hello HTTP/1.0\r\n\r\n").ok());
  auto rest = old.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, StartsWith("HTTP/1.0 200"));
}

TEST_F(HttpServerTest, HandlerSeesMethodPathQueryAndHeaders) {
  Start();
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /echo?a=1&b=2 HTTP/1.1\r\nHost: t\r\n"
                        "X-Test: abc\r\n\r\n")
                  .ok());
  auto res = ReadResponse(conn, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 202);
  EXPECT_EQ(res->headers["content-type"], "application/json");
  EXPECT_EQ(res->headers["cache-control"], "no-store");
  EXPECT_EQ(res->body, "GET /echo a=1&b=2 abc /echo?a=1&b=2");
}

TEST_F(HttpServerTest, OversizedHeaderGets431AndClose) {
  HttpServerOptions options;
  options.max_header_bytes = 1024;
  Start(options);
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send(absl::StrCat("GET /hello HTTP/1.1\r\nX-Big: ",
                                     std::string(2000, 'a'), "\r\n\r\n"))
                  .ok());
  auto rest = conn.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, StartsWith("HTTP/1.1 431"));
  // A header just under the limit is fine.
  RawConnection ok = Connect();
  ASSERT_TRUE(ok.Send(absl::StrCat("GET /hello HTTP/1.1\r\nX-Big: ",
                                   std::string(900, 'a'), "\r\n\r\n"))
                  .ok());
  auto res = ReadResponse(ok, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
}

TEST_F(HttpServerTest, MalformedRequestGets400AndClose) {
  Start();
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /hello HTTP/9.9 nonsense\r\n\r\n").ok());
  auto rest = conn.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, StartsWith("HTTP/1.1 400"));
  // Counted when the connection object goes, just after the close.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric("aside_http_connections_closed_total",
                      {{"reason", "bad_request"}}) == 1;
      },
      absl::Seconds(5)));
}

TEST_F(HttpServerTest, RequestBodyIsRefusedWith413AndClose) {
  Start();
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /hello HTTP/1.1\r\nHost: t\r\n"
                        "Content-Length: 5\r\n\r\nhello")
                  .ok());
  auto rest = conn.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(*rest, HasSubstr("Connection: close"));

  RawConnection chunked = Connect();
  ASSERT_TRUE(chunked
                  .Send("POST /hello HTTP/1.1\r\nHost: t\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                  .ok());
  rest = chunked.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, StartsWith("HTTP/1.1 405"));
}

TEST_F(HttpServerTest, SilentAndTricklingConnectionsClosedAtHeaderDeadline) {
  HttpServerOptions options;
  options.header_timeout = kShort;
  Start(options);
  const absl::Time start = absl::Now();
  std::vector<RawConnection> silent;
  for (int i = 0; i < 20; ++i) {
    silent.push_back(Connect());
  }
  std::vector<RawConnection> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(Connect());
  }
  std::vector<RawConnection*> slow_ptrs;
  for (RawConnection& c : slow) {
    slow_ptrs.push_back(&c);
  }
  Trickler trickler(slow_ptrs, absl::Milliseconds(200));
  for (auto* group : {&silent, &slow}) {
    for (RawConnection& conn : *group) {
      auto rest = conn.ReadUntilClosed(absl::Seconds(5));
      ASSERT_TRUE(rest.ok()) << rest.status();
      EXPECT_THAT(*rest, IsEmpty());
    }
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, kShort);
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_GE(trickler.sent(), 1);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric("aside_http_connections_closed_total",
                      {{"reason", "header_timeout"}}) == 23;
      },
      absl::Seconds(5)));
  EXPECT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; },
                        absl::Seconds(5)));
}

TEST_F(HttpServerTest, IdleKeepAliveConnectionClosedAfterIdleTimeout) {
  HttpServerOptions options;
  options.idle_timeout = kShort;
  Start(options);
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  auto res = ReadResponse(conn, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  const absl::Time answered = absl::Now();
  auto rest = conn.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_GE(absl::Now() - answered, kShort - absl::Milliseconds(20));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric("aside_http_connections_closed_total",
                      {{"reason", "idle_timeout"}}) == 1;
      },
      absl::Seconds(5)));
}

TEST_F(HttpServerTest, PeerThatStopsReadingIsClosedAtWriteDeadline) {
  HttpServerOptions options;
  options.write_timeout = kShort;
  Start(options);
  // Far more than the loopback socket buffers hold.
  big_body_bytes_ = 64 << 20;
  RawConnection conn = Connect();
  ASSERT_TRUE(conn.Send("GET /big HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric("aside_http_connections_closed_total",
                      {{"reason", "write_timeout"}}) == 1;
      },
      absl::Seconds(10)));
  EXPECT_EQ(server_->open_connections(), 0u);
}

TEST_F(HttpServerTest, ConnectionBeyondPeerCapIsClosedOthersServed) {
  HttpServerOptions options;
  options.max_connections_per_peer = 4;
  Start(options);
  std::vector<RawConnection> hogs;
  for (int i = 0; i < 4; ++i) {
    hogs.push_back(Connect("127.0.0.2"));
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 4; },
                        absl::Seconds(5)));
  RawConnection extra = Connect("127.0.0.2");
  auto rest = extra.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  // A 503 when the peer reads it before the close; nothing else.
  if (!rest->empty()) {
    EXPECT_THAT(*rest, StartsWith("HTTP/1.1 503"));
  }
  EXPECT_EQ(Metric("aside_http_connections_rejected_total",
                   {{"reason", "peer_limit"}}),
            1);
  // Another peer is served meanwhile.
  auto res = RawGet(kLocal, port_, "/hello", "127.0.0.1");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  for (RawConnection& hog : hogs) {
    EXPECT_TRUE(hog.PeerOpen());
  }
  // A freed slot can be used again.
  hogs.pop_back();
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 3; },
                        absl::Seconds(5)));
  res = RawGet(kLocal, port_, "/hello", "127.0.0.2");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
}

TEST_F(HttpServerTest, ConnectionBeyondTotalCapIsClosed) {
  HttpServerOptions options;
  options.max_connections = 6;
  Start(options);
  // Six kept-alive connections that each completed a request: none can be
  // evicted, so a seventh is refused.
  std::vector<RawConnection> hogs;
  for (int i = 0; i < 6; ++i) {
    hogs.push_back(Connect(absl::StrCat("127.0.1.", i + 1)));
    ASSERT_TRUE(
        hogs.back().Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").ok());
    auto res = ReadResponse(hogs.back(), absl::Seconds(5));
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200);
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 6; },
                        absl::Seconds(5)));
  RawConnection extra = Connect("127.0.1.100");
  auto rest = extra.ReadUntilClosed(absl::Seconds(5));
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Metric("aside_http_connections_rejected_total",
                   {{"reason", "total_limit"}}),
            1);
  hogs.clear();
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; },
                        absl::Seconds(5)));
  auto res = RawGet(kLocal, port_, "/hello");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
}

// Peers from many addresses holding partial requests fill the total cap
// without reaching any per-peer cap; a client that sends whole requests is
// still served: each new connection at the cap closes the oldest one that
// has not delivered a complete request.
TEST_F(HttpServerTest, PartialRequestsFromManyAddressesCannotKeepScrapesOut) {
  HttpServerOptions options;
  options.max_connections = 64;
  options.max_connections_per_peer = 4;
  options.header_timeout = absl::Seconds(30);  // the hogs outlive the test
  Start(options);
  constexpr int kAddresses = 20;  // 20 × 4 > 64
  std::vector<RawConnection> hogs;
  auto hog = [&](int i) {
    absl::StatusOr<RawConnection> c = RawConnection::Connect(
        kLocal, port_, absl::StrCat("127.0.2.", i % kAddresses + 1));
    if (c.ok() && c->Send("GET /hello HTTP/1.1\r\nHost: x\r\n").ok()) {
      hogs.push_back(*std::move(c));
    }
  };
  for (int i = 0; i < kAddresses * 4; ++i) {
    hog(i);
  }
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 64; },
                        absl::Seconds(5)));
  int served = 0;
  for (int round = 0; round < 30; ++round) {
    // The attackers re-open what was closed, as the scrapes go on.
    std::erase_if(hogs, [](RawConnection& c) { return !c.PeerOpen(); });
    for (int i = 0; hogs.size() < kAddresses * 4 && i < kAddresses * 4; ++i) {
      hog(i);
    }
    auto res = RawGet(kLocal, port_, "/hello");
    if (res.ok() && res->status == 200) {
      ++served;
    }
  }
  EXPECT_EQ(served, 30);
  EXPECT_GT(
      Metric("aside_http_connections_closed_total", {{"reason", "evicted"}}),
      0);
  EXPECT_LE(server_->open_connections(), 64u);
}

// The acceptor survives EMFILE: with no descriptor left, accept fails and is
// retried; once descriptors are available again the waiting connection is
// served.
TEST_F(HttpServerTest, AcceptRecoversFromDescriptorExhaustion) {
  std::vector<std::string> warnings;
  Mutex warnings_mu;
  HttpServerOptions options;
  options.warn = [&](absl::string_view event, absl::string_view detail) {
    MutexLock lock(&warnings_mu);
    warnings.push_back(absl::StrCat(event, ": ", detail));
  };
  Start(options);
  {
    // One request served first: the server's thread is running and has
    // accepted once before descriptors run out (under UBSan a first dynamic
    // type check opens a pipe to probe memory, and would misfire then).
    RawConnection first = Connect();
    ASSERT_TRUE(first.Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
    auto served = ReadResponse(first, absl::Seconds(5));
    ASSERT_TRUE(served.ok()) << served.status();
  }
  // Its descriptor on the server's side is closed too: none frees up below.
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; },
                        absl::Seconds(5)));
  // Open the client's socket first: connect needs no new descriptor.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  // The lowest free descriptor number: with the soft limit there, no new
  // descriptor can be opened by anyone in the process.
  const int lowest_free = dup(0);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  const int client_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(client_fd, lowest_free);
  RawConnection client(client_fd);
  const int next_free = dup(0);
  ASSERT_GE(next_free, 0);
  close(next_free);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(next_free);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port_));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int connected =
      connect(client_fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  // While no descriptor can be opened the wait reads only the warnings: a
  // metric read may need one (the same UBSan probe, for the registry).
  const bool saw_error = WaitUntil(
      [&] {
        MutexLock lock(&warnings_mu);
        return !warnings.empty();
      },
      absl::Seconds(5));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_EQ(connected, 0);
  ASSERT_TRUE(saw_error);
  EXPECT_GE(Metric("aside_http_accept_errors_total"), 1);
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  auto res = ReadResponse(client, absl::Seconds(5));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
  MutexLock lock(&warnings_mu);
  ASSERT_FALSE(warnings.empty());
  EXPECT_THAT(warnings.front(), HasSubstr("http.accept_error"));
}

TEST_F(HttpServerTest, StopIsPromptWithConnectionsOpen) {
  Start();
  std::vector<RawConnection> conns;
  for (int i = 0; i < 100; ++i) {
    conns.push_back(Connect(absl::StrCat("127.0.2.", i % 50 + 1)));
  }
  // One mid-request, one kept alive after a response.
  ASSERT_TRUE(conns[0].Send("GET /hel").ok());
  ASSERT_TRUE(conns[1].Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  ASSERT_TRUE(ReadResponse(conns[1], absl::Seconds(5)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 100; },
                        absl::Seconds(5)));
  const absl::Time start = absl::Now();
  server_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(server_->open_connections(), 0u);
  for (RawConnection& conn : conns) {
    EXPECT_TRUE(conn.ReadUntilClosed(absl::Seconds(2)).ok());
  }
  EXPECT_EQ(
      Metric("aside_http_connections_closed_total", {{"reason", "shutdown"}}),
      100);
  server_->Stop();  // idempotent
  EXPECT_FALSE(RawConnection::Connect(kLocal, port_).ok());
}

TEST_F(HttpServerTest, DescriptorsReturnToBaselineAfterConnectionsClose) {
  HttpServerOptions options;
  options.header_timeout = kShort;
  options.idle_timeout = kShort;
  Start(options);
  ASSERT_TRUE(RawGet(kLocal, port_, "/hello").ok());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; },
                        absl::Seconds(5)));
  const int baseline = CountOpenFds();
  std::vector<RawConnection> conns;
  for (int i = 0; i < 200; ++i) {
    conns.push_back(Connect(absl::StrCat("127.0.3.", i % 10 + 1)));
  }
  // Some answered and kept alive, one mid-request, the rest silent.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(conns[i].Send("GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").ok());
  }
  ASSERT_TRUE(conns[50].Send("GET /hel").ok());
  ASSERT_TRUE(WaitUntil([&] { return server_->open_connections() == 200; },
                        absl::Seconds(5)));
  EXPECT_GE(CountOpenFds(), baseline + 400);
  // Half closed by the clients, the rest by the server's deadlines.
  conns.resize(100);
  EXPECT_TRUE(WaitUntil([&] { return server_->open_connections() == 0; },
                        absl::Seconds(5)));
  for (RawConnection& conn : conns) {
    EXPECT_TRUE(conn.ReadUntilClosed(absl::Seconds(2)).ok());
  }
  conns.clear();
  EXPECT_TRUE(
      WaitUntil([&] { return CountOpenFds() == baseline; }, absl::Seconds(5)))
      << "fds " << CountOpenFds() << " vs " << baseline;
}

TEST_F(HttpServerTest, ServesIpv6Loopback) {
  Start({}, "[::1]:0");
  auto res = RawGet("::1", port_, "/hello");
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->status, 200);
}

TEST(HttpServerStartTest, BadOrBusyAddressFails) {
  HttpServer bad;
  absl::StatusOr<int> port = bad.Start("not an address");
  EXPECT_FALSE(port.ok());

  HttpServer first;
  port = first.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  HttpServer second;
  absl::StatusOr<int> again = second.Start(absl::StrCat("127.0.0.1:", *port));
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("bind"));
  EXPECT_FALSE(first.Start("127.0.0.1:0").ok());  // once per server
}

}  // namespace
}  // namespace aside::server
