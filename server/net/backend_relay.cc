#include "server/net/backend_relay.h"

#include <grpc/grpc.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "lib/thread_name.h"
#include "server/base/log.h"
#include "server/net/h2_response_guard.h"

// gRPC's HTTP CONNECT handshake runs for a channel that has these arguments
// (src/core/lib/transport/http_connect_handshaker.h in gRPC 1.51): the
// server to ask for, and extra request headers ("key:value" lines).
#define ASIDE_GRPC_ARG_HTTP_CONNECT_SERVER "grpc.http_connect_server"
#define ASIDE_GRPC_ARG_HTTP_CONNECT_HEADERS "grpc.http_connect_headers"

namespace aside::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr absl::string_view kHeader = "aside-relay";
// A CONNECT request is a few hundred bytes; anything longer is not ours.
constexpr size_t kMaxRequest = 4096;
constexpr auto kRequestTimeout = std::chrono::seconds(10);
constexpr size_t kChunk = 16 << 10;

std::string MakeToken() {
  std::array<unsigned char, 16> bytes{};
  size_t have = 0;
  while (have < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + have, bytes.size() - have, 0);
    if (n > 0) {
      have += static_cast<size_t>(n);
    }
  }
  std::string token;
  for (unsigned char b : bytes) {
    absl::StrAppend(&token, absl::Hex(b, absl::kZeroPad2));
  }
  return token;
}

// "host:port" or "[v6]:port" into host and port.
bool SplitHostPort(absl::string_view address, std::string* host,
                   std::string* port) {
  if (absl::ConsumePrefix(&address, "[")) {
    const size_t end = address.find("]:");
    if (end == absl::string_view::npos) {
      return false;
    }
    *host = std::string(address.substr(0, end));
    *port = std::string(address.substr(end + 2));
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos || address.find(':') != colon) {
      return false;
    }
    *host = std::string(address.substr(0, colon));
    *port = std::string(address.substr(colon + 1));
  }
  uint32_t number = 0;
  return !host->empty() && absl::SimpleAtoi(*port, &number) && number > 0 &&
         number <= 65535;
}

}  // namespace

class BackendRelay::Impl {
 public:
  Impl(BackendRelay* owner, Metrics* metrics)
      : owner_(owner), metrics_(metrics), acceptor_(io_) {}

  absl::Status Listen() {
    error_code ec;
    const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "backend relay: cannot listen on 127.0.0.1: ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }

  void Run() {
    Accept();
    thread_ = std::thread([this] {
      NameThisThread("aside-backends");
      io_.run();
    });
  }

  ~Impl() {
    io_.stop();
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  int port() const { return port_; }

 private:
  class Conn;

  void Accept();
  void Refused(const Conn& conn, const H2ResponseGuard& guard);

  BackendRelay* const owner_;
  Metrics* const metrics_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
};

// One relayed connection: gRPC's socket, the backend's, and the bytes
// between them. Lives on the relay's thread, held by its pending handlers.
class BackendRelay::Impl::Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(Impl* relay, tcp::socket client)
      : relay_(relay),
        client_(std::move(client)),
        backend_(relay->io_),
        resolver_(relay->io_),
        timer_(relay->io_) {
    ++relay_->owner_->open_;
  }
  ~Conn() { --relay_->owner_->open_; }

  void Start() {
    Arm(kRequestTimeout);
    ReadRequest();
  }

  const std::string& address() const { return address_; }
  const std::string& kind() const { return kind_; }

 private:
  void Arm(std::chrono::seconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) {
        self->Close();
      }
    });
  }

  void ReadRequest() {
    client_.async_read_some(asio::buffer(down_), [self = shared_from_this()](
                                                     error_code ec, size_t n) {
      if (ec) {
        self->Close();
        return;
      }
      self->request_.append(self->down_.data(), n);
      if (self->request_.find("\r\n\r\n") != std::string::npos) {
        self->OnRequest();
      } else if (self->request_.size() > kMaxRequest) {
        self->Close();
      } else {
        self->ReadRequest();
      }
    });
  }

  // "CONNECT host:port HTTP/1.1", then headers; ours names the token, the
  // kind and the limit.
  void OnRequest() {
    const size_t end = request_.find("\r\n\r\n");
    const std::vector<absl::string_view> lines =
        absl::StrSplit(absl::string_view(request_).substr(0, end), "\r\n");
    const std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
    bool ours = false;
    uint32_t limit = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
      absl::string_view line = lines[i];
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos ||
          !absl::EqualsIgnoreCase(line.substr(0, colon), kHeader)) {
        continue;
      }
      const std::vector<absl::string_view> words = absl::StrSplit(
          absl::StripAsciiWhitespace(line.substr(colon + 1)), ' ');
      ours = words.size() == 3 && words[0] == relay_->owner_->token_ &&
             absl::SimpleAtoi(words[2], &limit);
      if (ours) {
        kind_ = std::string(words[1]);
      }
    }
    std::string host, port;
    if (!ours || first.size() != 3 || first[0] != "CONNECT" ||
        !SplitHostPort(first[1], &host, &port)) {
      Reply("HTTP/1.1 403 Forbidden\r\n\r\n", false);
      return;
    }
    address_ = std::string(first[1]);
    guard_.emplace(H2ResponseGuardOptions{.max_message_bytes = limit});
    // Nothing follows the request before the reply: gRPC waits for it.
    request_.clear();
    timer_.cancel();
    Arm(std::chrono::duration_cast<std::chrono::seconds>(kConnectTimeout));
    // gRPC sends nothing before the reply: its socket turning readable
    // meanwhile means it gave up (its own connect deadline), and so does
    // the relay, instead of holding a connection attempt for nobody.
    client_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](error_code ec) {
                         if (!ec && !self->connected_) {
                           self->Close();
                         }
                       });
    resolver_.async_resolve(
        host, port, tcp::resolver::numeric_service,
        [self = shared_from_this()](error_code ec,
                                    tcp::resolver::results_type results) {
          if (ec) {
            self->Reply("HTTP/1.1 502 Bad Gateway\r\n\r\n", false);
            return;
          }
          asio::async_connect(
              self->backend_, results,
              [self](error_code ec, const tcp::endpoint&) {
                if (ec) {
                  self->Reply("HTTP/1.1 502 Bad Gateway\r\n\r\n", false);
                  return;
                }
                self->timer_.cancel();
                self->connected_ = true;
                self->Reply("HTTP/1.1 200 OK\r\n\r\n", true);
              });
        });
  }

  void Reply(std::string text, bool relay) {
    if (closed_) {
      return;
    }
    reply_ = std::move(text);
    asio::async_write(
        client_, asio::buffer(reply_),
        [self = shared_from_this(), relay](error_code ec, size_t) {
          if (ec || !relay) {
            self->Close();
            return;
          }
          self->Up();
          self->Down();
        });
  }

  // gRPC to the backend: passed on as it is.
  void Up() {
    client_.async_read_some(asio::buffer(up_), [self = shared_from_this()](
                                                   error_code ec, size_t n) {
      if (ec) {
        self->EndOf(/*from_backend=*/false, ec);
        return;
      }
      asio::async_write(self->backend_, asio::buffer(self->up_.data(), n),
                        [self](error_code ec, size_t) {
                          if (ec) {
                            self->Close();
                          } else {
                            self->Up();
                          }
                        });
    });
  }

  // The backend to gRPC: read by the guard first.
  void Down() {
    backend_.async_read_some(asio::buffer(down_), [self = shared_from_this()](
                                                      error_code ec, size_t n) {
      if (ec) {
        self->EndOf(/*from_backend=*/true, ec);
        return;
      }
      if (!self->guard_->Read(std::string_view(self->down_.data(), n))) {
        self->relay_->Refused(*self, *self->guard_);
        self->Close();
        return;
      }
      asio::async_write(self->client_, asio::buffer(self->down_.data(), n),
                        [self](error_code ec, size_t) {
                          if (ec) {
                            self->Close();
                          } else {
                            self->Down();
                          }
                        });
    });
  }

  // One side's end of stream is passed to the other; an error, or both
  // ends, close the connection.
  void EndOf(bool from_backend, error_code ec) {
    if (ec != asio::error::eof) {
      Close();
      return;
    }
    error_code ignored;
    (from_backend ? client_ : backend_)
        .shutdown(tcp::socket::shutdown_send, ignored);
    (from_backend ? backend_done_ : client_done_) = true;
    if (backend_done_ && client_done_) {
      Close();
    }
  }

  void Close() {
    if (closed_) {
      return;
    }
    closed_ = true;
    error_code ignored;
    timer_.cancel();
    resolver_.cancel();
    client_.close(ignored);
    backend_.close(ignored);
  }

  Impl* const relay_;
  tcp::socket client_;
  tcp::socket backend_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  std::string request_;
  std::string reply_;
  std::string address_;
  std::string kind_;
  std::optional<H2ResponseGuard> guard_;
  std::array<char, kChunk> up_{};
  std::array<char, kChunk> down_{};
  bool connected_ = false;
  bool client_done_ = false;
  bool backend_done_ = false;
  bool closed_ = false;
};

void BackendRelay::Impl::Accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) {
      return;
    }
    if (!ec) {
      std::make_shared<Conn>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

void BackendRelay::Impl::Refused(const Conn& conn,
                                 const H2ResponseGuard& guard) {
  ++owner_->refused_;
  if (metrics_ != nullptr) {
    metrics_->backend_refused
        .Add({{"kind", conn.kind()}, {"backend", conn.address()}})
        .Increment();
  }
  LogThrottled(LogLevel::kWarn, "backend.refused",
               {{"backend", conn.address()},
                {"kind", conn.kind()},
                {"why", guard.why()}});
}

absl::StatusOr<std::unique_ptr<BackendRelay>> BackendRelay::Start(
    Metrics* metrics) {
  std::unique_ptr<BackendRelay> relay(new BackendRelay());
  relay->token_ = MakeToken();
  relay->impl_ = std::make_unique<Impl>(relay.get(), metrics);
  if (absl::Status s = relay->impl_->Listen(); !s.ok()) {
    return s;
  }
  relay->port_ = relay->impl_->port();
  relay->impl_->Run();
  return relay;
}

BackendRelay::~BackendRelay() { impl_.reset(); }

std::string BackendRelay::Route(absl::string_view address,
                                absl::string_view kind,
                                uint32_t max_message_bytes,
                                grpc::ChannelArguments* args,
                                absl::string_view authority) const {
  args->SetString(ASIDE_GRPC_ARG_HTTP_CONNECT_SERVER, std::string(address));
  args->SetString(
      ASIDE_GRPC_ARG_HTTP_CONNECT_HEADERS,
      absl::StrCat(kHeader, ":", token_, " ", kind, " ", max_message_bytes));
  args->SetString(GRPC_ARG_DEFAULT_AUTHORITY,
                  std::string(authority.empty() ? address : authority));
  // Identity only: a compressed message is refused (h2_response_guard.h).
  args->SetInt(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1);
  // The relay is the proxy; none from the environment.
  args->SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args->SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint32_t>(max_message_bytes, INT32_MAX)));
  return absl::StrCat("ipv4:127.0.0.1:", port_);
}

}  // namespace aside::server
