#include "tests/health/test_backends.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <istream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/clock.h"

namespace aside::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

}  // namespace

// ---- FakeBackend ----

class FakeBackend::Impl {
 public:
  explicit Impl(FakeBackend* owner)
      : owner_(owner), work_(asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() { Stop(); }

  absl::StatusOr<uint16_t> Listen(const std::string& ip, uint16_t port,
                                  int backlog) {
    error_code ec;
    auto acceptor = std::make_shared<tcp::acceptor>(io_);
    const tcp::endpoint endpoint(asio::ip::make_address(ip, ec), port);
    if (ec) {
      return absl::InvalidArgumentError(ec.message());
    }
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(backlog, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("listen on ", ip, ":", port, ": ", ec.message()));
    }
    const uint16_t bound = acceptor->local_endpoint().port();
    asio::post(io_, [this, acceptor] {
      acceptors_.push_back(acceptor);
      Accept(acceptor);
    });
    return bound;
  }

  void Stop() {
    if (stopped_.exchange(true)) {
      return;
    }
    asio::post(io_, [this] {
      error_code ignored;
      for (auto& acceptor : acceptors_) {
        acceptor->close(ignored);
      }
      for (auto& conn : conns_) {
        conn->socket.close(ignored);
      }
    });
    work_.reset();
    thread_.join();
  }

 private:
  struct Conn {
    explicit Conn(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    asio::streambuf in{64 * 1024};
    std::string out;
    char scratch[4096];
  };
  using ConnPtr = std::shared_ptr<Conn>;

  void Accept(const std::shared_ptr<tcp::acceptor>& acceptor) {
    auto conn = std::make_shared<Conn>(io_);
    acceptor->async_accept(conn->socket, [this, acceptor, conn](error_code ec) {
      if (ec) {
        if (ec != asio::error::operation_aborted && acceptor->is_open()) {
          Accept(acceptor);
        }
        return;
      }
      Opened(conn);
      Accept(acceptor);
    });
  }

  void Opened(const ConnPtr& conn) {
    conns_.insert(conn);
    const uint64_t open = ++owner_->open_;
    uint64_t max = owner_->max_open_.load();
    while (open > max && !owner_->max_open_.compare_exchange_weak(max, open)) {
    }
    ++owner_->accepted_;
    owner_->Counted();
    switch (owner_->mode_.load()) {
      case Mode::kAcceptClose:
        Close(conn);
        return;
      case Mode::kBlackHole:
        Discard(conn);
        return;
      case Mode::kHttp:
        ReadRequest(conn);
        return;
    }
  }

  void Close(const ConnPtr& conn) {
    if (conns_.erase(conn) == 0) {
      return;
    }
    error_code ignored;
    conn->socket.close(ignored);
    --owner_->open_;
  }

  void Discard(const ConnPtr& conn) {
    conn->socket.async_read_some(asio::buffer(conn->scratch),
                                 [this, conn](error_code ec, std::size_t) {
                                   if (ec) {
                                     Close(conn);
                                   } else {
                                     Discard(conn);
                                   }
                                 });
  }

  void ReadRequest(const ConnPtr& conn) {
    asio::async_read_until(conn->socket, conn->in, "\r\n\r\n",
                           [this, conn](error_code ec, std::size_t n) {
                             if (ec) {
                               Close(conn);
                               return;
                             }
                             std::string head(
                                 asio::buffers_begin(conn->in.data()),
                                 asio::buffers_begin(conn->in.data()) + n);
                             conn->in.consume(n);
                             Answer(conn, head);
                           });
  }

  void Answer(const ConnPtr& conn, const std::string& head) {
    Request request;
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    if (!lines.empty()) {
      request.request_line = lines[0];
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      if (absl::StartsWithIgnoreCase(lines[i], "host:")) {
        request.host =
            std::string(absl::StripAsciiWhitespace(lines[i].substr(5)));
      }
    }
    HttpReply reply;
    {
      aside::MutexLock lock(&owner_->mu_);
      reply = owner_->reply_;
    }
    reply.status = owner_->status_.load();
    request.status = reply.kind == HttpKind::kStatus ? reply.status : 0;
    {
      aside::MutexLock lock(&owner_->mu_);
      owner_->seen_.push_back(request);
    }
    ++owner_->requests_;
    owner_->Counted();

    bool endless = false;
    bool stalled = false;
    switch (reply.kind) {
      case HttpKind::kStatus:
        conn->out = absl::StrCat("HTTP/1.1 ", reply.status,
                                 " X\r\nContent-Length: 2\r\n"
                                 "Connection: close\r\n\r\nok");
        break;
      case HttpKind::kRaw:
        conn->out = reply.raw;
        break;
      case HttpKind::kHugeHeader:
        conn->out = absl::StrCat("HTTP/1.1 200 OK\r\nX-Pad: ",
                                 std::string(1 << 20, 'a'), "\r\n\r\n");
        break;
      case HttpKind::kEndlessBody:
        conn->out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        endless = true;
        break;
      case HttpKind::kStalledBody: {
        conn->out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        const std::string chunk =
            absl::StrCat("1000\r\n", std::string(4096, 'b'), "\r\n");
        for (int i = 0; i < 128; ++i) {
          conn->out += chunk;
        }
        stalled = true;
        break;
      }
    }
    asio::async_write(
        conn->socket, asio::buffer(conn->out),
        [this, conn, endless, stalled](error_code ec, std::size_t) {
          if (!ec && stalled) {
            Discard(conn);  // the body never ends
            return;
          }
          if (ec || !endless) {
            if (!ec) {
              error_code ignored;
              conn->socket.shutdown(tcp::socket::shutdown_send, ignored);
              Discard(conn);  // until the client closes
            } else {
              Close(conn);
            }
            return;
          }
          conn->out = absl::StrCat("1000\r\n", std::string(4096, 'b'), "\r\n");
          WriteForever(conn);
        });
  }

  void WriteForever(const ConnPtr& conn) {
    asio::async_write(conn->socket, asio::buffer(conn->out),
                      [this, conn](error_code ec, std::size_t) {
                        if (ec) {
                          Close(conn);
                        } else {
                          WriteForever(conn);
                        }
                      });
  }

  FakeBackend* const owner_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  // io thread only.
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors_;
  std::set<ConnPtr> conns_;
};

FakeBackend::FakeBackend(Mode mode)
    : mode_(mode), impl_(std::make_unique<Impl>(this)) {}

FakeBackend::~FakeBackend() { Stop(); }

absl::StatusOr<uint16_t> FakeBackend::Listen(const std::string& ip,
                                             uint16_t port, int backlog) {
  return impl_->Listen(ip, port, backlog);
}

void FakeBackend::Stop() { impl_->Stop(); }

void FakeBackend::SetReply(const HttpReply& reply) {
  aside::MutexLock lock(&mu_);
  reply_ = reply;
  status_.store(reply.status);
}

std::vector<FakeBackend::Request> FakeBackend::requests_seen() const {
  aside::MutexLock lock(&mu_);
  return seen_;
}

void FakeBackend::Counted() {
  aside::MutexLock lock(&mu_);  // waiters re-check as the lock is released
}

bool FakeBackend::WaitForAccepted(uint64_t n, absl::Duration timeout) {
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([&] { return accepted_.load() >= n; }, timeout);
}

bool FakeBackend::WaitForRequests(uint64_t n, absl::Duration timeout) {
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([&] { return requests_.load() >= n; }, timeout);
}

// ---- ScriptedHealthService ----

ScriptedHealthService::~ScriptedHealthService() { ReleaseHeld(); }

grpc::ServerUnaryReactor* ScriptedHealthService::Check(
    grpc::CallbackServerContext* context,
    const grpc::health::v1::HealthCheckRequest* request,
    grpc::health::v1::HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  aside::MutexLock lock(&mu_);
  ++checks_;
  if (hang_) {
    held_.push_back(reactor);
    return reactor;
  }
  auto it = statuses_.find(request->service());
  if (it == statuses_.end()) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return reactor;
  }
  response->set_status(
      static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(
          it->second));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void ScriptedHealthService::Set(const std::string& service, int status) {
  aside::MutexLock lock(&mu_);
  statuses_[service] = status;
}

void ScriptedHealthService::SetHang(bool hang) {
  aside::MutexLock lock(&mu_);
  hang_ = hang;
}

void ScriptedHealthService::ReleaseHeld() {
  std::vector<grpc::ServerUnaryReactor*> held;
  {
    aside::MutexLock lock(&mu_);
    held.swap(held_);
  }
  for (grpc::ServerUnaryReactor* reactor : held) {
    reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "released"));
  }
}

bool ScriptedHealthService::WaitForChecks(uint64_t n, absl::Duration timeout) {
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([&] { return checks_.load() >= n; }, timeout);
}

// ---- GrpcBackend ----

absl::StatusOr<std::unique_ptr<GrpcBackend>> GrpcBackend::Start(
    bool with_health_service) {
  std::unique_ptr<GrpcBackend> backend(new GrpcBackend);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &backend->port_);
  if (with_health_service) {
    builder.RegisterService(&backend->health_);
  } else {
    builder.RegisterService(&backend->other_);  // gRPC needs one service
  }
  backend->server_ = builder.BuildAndStart();
  if (backend->server_ == nullptr || backend->port_ == 0) {
    return absl::UnavailableError("grpc backend: cannot start a server");
  }
  return backend;
}

GrpcBackend::~GrpcBackend() {
  health_.ReleaseHeld();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
  }
}

std::string GrpcBackend::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

// ---- ProbeRecorder ----

ProbeRecorder::ProbeRecorder(server::HealthRegistry& registry)
    : registry_(registry) {
  registry_.SetProbeObserverForTest([this](const server::ProbeEvent& event) {
    aside::MutexLock lock(&mu_);
    events_.push_back({event, MonotonicNanos()});
  });
}

ProbeRecorder::~ProbeRecorder() { registry_.SetProbeObserverForTest(nullptr); }

bool ProbeRecorder::WaitUntil(
    const std::function<bool(const std::vector<Event>&)>& done,
    absl::Duration timeout) {
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout([&] { return done(events_); }, timeout);
}

absl::StatusOr<server::ProbeEvent> ProbeRecorder::WaitForResult(
    uint64_t target_id, size_t n, absl::Duration timeout) {
  std::optional<server::ProbeEvent> found;
  WaitUntil(
      [&](const std::vector<Event>& events) {
        size_t seen = 0;
        for (const Event& e : events) {
          if (e.event.target_id == target_id && ++seen == n) {
            found = e.event;
            return true;
          }
        }
        return false;
      },
      timeout);
  if (!found) {
    return absl::DeadlineExceededError(
        absl::StrCat("no result #", n, " for target ", target_id, " within ",
                     absl::FormatDuration(timeout)));
  }
  return *found;
}

std::vector<ProbeRecorder::Event> ProbeRecorder::EventsFor(
    uint64_t target_id) const {
  aside::MutexLock lock(&mu_);
  std::vector<Event> out;
  for (const Event& e : events_) {
    if (e.event.target_id == target_id) {
      out.push_back(e);
    }
  }
  return out;
}

std::vector<ProbeRecorder::Event> ProbeRecorder::events() const {
  aside::MutexLock lock(&mu_);
  return events_;
}

size_t ProbeRecorder::CountFor(uint64_t target_id) const {
  aside::MutexLock lock(&mu_);
  return std::count_if(events_.begin(), events_.end(), [&](const Event& e) {
    return e.event.target_id == target_id;
  });
}

// ---- File descriptors ----

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return -1;
  }
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') {
      ++count;
    }
  }
  closedir(dir);
  return count - 1;  // the directory stream's own descriptor
}

uint64_t RaiseFdLimit(uint64_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return 0;
  }
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = std::min<rlim_t>(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

}  // namespace aside::testing
