// Every probe kind against real loopback servers started by the test:
// TCP listeners that accept, refuse or never accept; HTTP servers with good,
// bad, malformed, oversized and endless answers, or none; real gRPC servers
// with a scripted grpc.health.v1 service, or without one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/health/health_registry.h"
#include "tests/health/health_test_util.h"
#include "tests/health/test_backends.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::FakeBackend;
using ::aside::testing::GrpcBackend;
using ::aside::testing::Loopback;
using ::aside::testing::ProbeRecorder;
using ::aside::testing::ProbeSpec;
using ::aside::testing::RegistryUnderTest;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = HealthCheckSpec::Kind;
using Response = grpc::health::v1::HealthCheckResponse;

constexpr absl::Duration kWait = absl::Seconds(10);

class ProbeKindsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(r_.registry, nullptr); }

  // Acquires the target, waits for its `n`-th result and returns it.
  ProbeResult Probe(const std::string& address, const HealthCheckSpec& spec,
                    size_t n = 1) {
    auto handle = r_.registry->Acquire(address, spec, "test");
    EXPECT_TRUE(handle.ok()) << handle.status();
    if (!handle.ok()) {
      return {};
    }
    auto event = recorder_.WaitForResult(handle->target_id(), n, kWait);
    EXPECT_TRUE(event.ok()) << event.status();
    last_state_ = handle->state();
    return event.ok() ? event->result : ProbeResult{};
  }

  RegistryUnderTest r_;
  ProbeRecorder recorder_{*r_.registry};
  HealthState last_state_ = HealthState::kUnknown;
};

// ---- tcp ----

TEST_F(ProbeKindsTest, TcpAcceptingListenerIsHealthy) {
  FakeBackend backend(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kTcp));
  EXPECT_TRUE(result.success) << result.reason;
  EXPECT_EQ(result.reason, "");
  EXPECT_TRUE(backend.WaitForAccepted(1, kWait));
}

TEST_F(ProbeKindsTest, TcpClosedPortIsRefused) {
  const int port = testing::PickUnusedPort();
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kTcp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "connect: connection refused");
  EXPECT_EQ(last_state_, HealthState::kUnhealthy);
}

TEST_F(ProbeKindsTest, TcpListenerThatNeverAcceptsTimesOut) {
  // A listener with a full accept queue drops further SYNs: the connect
  // hangs until the probe's timeout.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 0), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 2; ++i) {  // fill the queue (backlog 0 holds one)
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fillers.push_back(c);
  }
  ProbeResult result =
      Probe(Loopback(port),
            ProbeSpec(Kind::kTcp, absl::Seconds(10), absl::Milliseconds(200)));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "timeout after 200ms (connecting)");
  EXPECT_GE(result.latency, absl::Milliseconds(200));
  for (int c : fillers) ::close(c);
  ::close(fd);
}

TEST_F(ProbeKindsTest, SpecPortOverridesTheBackendPort) {
  FakeBackend backend(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  HealthCheckSpec spec = ProbeSpec(Kind::kTcp);
  spec.port = port;
  const int closed = testing::PickUnusedPort();
  ProbeResult result = Probe(Loopback(closed), spec);
  EXPECT_TRUE(result.success) << result.reason;
}

// ---- http ----

TEST_F(ProbeKindsTest, HttpOkSendsPathAndHost) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_path = "/healthz?deep=1";
  ProbeResult result = Probe(Loopback(port), spec);
  EXPECT_TRUE(result.success) << result.reason;
  auto seen = backend.requests_seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].request_line, "GET /healthz?deep=1 HTTP/1.1");
  EXPECT_EQ(seen[0].host, Loopback(port));

  spec.http_host = "payments.internal";
  result = Probe(Loopback(port), spec);
  EXPECT_TRUE(result.success) << result.reason;
  EXPECT_EQ(backend.requests_seen().back().host, "payments.internal");
}

TEST_F(ProbeKindsTest, HttpServiceUnavailableIsUnhealthy) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetStatus(503);
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http status 503");
}

TEST_F(ProbeKindsTest, HttpExpectedStatusRangesAreHonoured) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_expected_statuses = {{200, 200}, {418, 418}};
  backend.SetStatus(418);
  EXPECT_TRUE(Probe(Loopback(port), spec).success);
  backend.SetStatus(204);
  spec.http_path = "/other";  // a new target
  ProbeResult result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http status 204");
  // The default range is 200-399.
  backend.SetStatus(399);
  EXPECT_TRUE(Probe(Loopback(port), ProbeSpec(Kind::kHttp)).success);
}

TEST_F(ProbeKindsTest, HttpMalformedStatusLineFails) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetReply({FakeBackend::HttpKind::kRaw, 0,
                    "HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n"});
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_THAT(result.reason, StartsWith("http malformed response: "));

  backend.SetReply({FakeBackend::HttpKind::kRaw, 0, "SSH-2.0-OpenSSH\r\n\r\n"});
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_path = "/ssh";
  result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_THAT(result.reason, StartsWith("http malformed response: "));
}

TEST_F(ProbeKindsTest, HttpStatusOutsideTheValidRangeFails) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_expected_statuses = {{100, 599}};
  backend.SetReply({FakeBackend::HttpKind::kRaw, 0,
                    "HTTP/1.1 999 Weird\r\nContent-Length: 0\r\n\r\n"});
  ProbeResult result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http status 999 out of range");

  backend.SetReply({FakeBackend::HttpKind::kRaw, 0,
                    "HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n"});
  spec.http_path = "/low";
  result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http status 99 out of range");
}

TEST_F(ProbeKindsTest, HttpHugeHeaderFailsAtTheLimit) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetReply({FakeBackend::HttpKind::kHugeHeader, 200, ""});
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http response header exceeds 16384 bytes");
  EXPECT_LT(result.latency, absl::Milliseconds(500));  // not the timeout
}

TEST_F(ProbeKindsTest, HttpEndlessBodyFailsAtTheBodyLimit) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetReply({FakeBackend::HttpKind::kEndlessBody, 200, ""});
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_body_limit = 8192;
  ProbeResult result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http body exceeds 8192 bytes");
  EXPECT_LT(result.latency, absl::Milliseconds(500));
}

TEST_F(ProbeKindsTest, HttpDeclaredBodyOverTheLimitFails) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetReply({FakeBackend::HttpKind::kRaw, 0,
                    "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n"});
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http body exceeds 65536 bytes");
}

TEST_F(ProbeKindsTest, HttpConnectionClosedWithoutAnswerFails) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetReply({FakeBackend::HttpKind::kRaw, 0, ""});
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http connection closed before a response");

  backend.SetReply({FakeBackend::HttpKind::kRaw, 0,
                    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"});
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp);
  spec.http_path = "/short";
  result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "http response truncated (connection closed)");
}

TEST_F(ProbeKindsTest, HttpBlackHoleTimesOut) {
  FakeBackend backend(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  ProbeResult result =
      Probe(Loopback(port),
            ProbeSpec(Kind::kHttp, absl::Seconds(10), absl::Milliseconds(150)));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "timeout after 150ms (waiting for the response)");
  EXPECT_GE(result.latency, absl::Milliseconds(150));
  EXPECT_LT(result.latency, absl::Seconds(5));
}

TEST_F(ProbeKindsTest, HttpClosedPortIsRefused) {
  const int port = testing::PickUnusedPort();
  ProbeResult result = Probe(Loopback(port), ProbeSpec(Kind::kHttp));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "connect: connection refused");
}

// ---- grpc ----

HealthCheckSpec GrpcSpec(const std::string& service = "") {
  HealthCheckSpec spec =
      ProbeSpec(Kind::kGrpc, absl::Milliseconds(50), absl::Milliseconds(1000));
  spec.grpc_service = service;
  spec.rise = 1;
  spec.fall = 1;
  return spec;
}

TEST_F(ProbeKindsTest, GrpcServingIsHealthyAndNotServingIsNot) {
  ASSERT_OK_AND_ASSIGN(auto backend, GrpcBackend::Start(true));
  backend->health().Set("payments", Response::SERVING);
  ASSERT_OK_AND_ASSIGN(
      HealthHandle h,
      r_.registry->Acquire(backend->address(), GrpcSpec("payments"), "t"));
  ASSERT_OK_AND_ASSIGN(ProbeEvent first,
                       recorder_.WaitForResult(h.target_id(), 1, kWait));
  EXPECT_TRUE(first.result.success) << first.result.reason;
  EXPECT_EQ(first.result.reason, "");
  EXPECT_EQ(h.state(), HealthState::kHealthy);

  backend->health().Set("payments", Response::NOT_SERVING);
  ASSERT_TRUE(recorder_.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kUnhealthy; },
      kWait));
  auto events = recorder_.EventsFor(h.target_id());
  EXPECT_EQ(events.back().event.result.reason, "grpc status NOT_SERVING");

  backend->health().Set("payments", Response::SERVING);
  ASSERT_TRUE(recorder_.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kHealthy; }, kWait));
}

TEST_F(ProbeKindsTest, GrpcUnknownServiceIsUnhealthy) {
  ASSERT_OK_AND_ASSIGN(auto backend, GrpcBackend::Start(true));
  backend->health().Set("payments", Response::SERVING);
  ProbeResult result = Probe(backend->address(), GrpcSpec("billing"));
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "grpc NOT_FOUND: unknown service");
}

TEST_F(ProbeKindsTest, GrpcServiceUnknownAndOutOfEnumValuesAreUnhealthy) {
  ASSERT_OK_AND_ASSIGN(auto backend, GrpcBackend::Start(true));
  backend->health().Set("a", Response::SERVICE_UNKNOWN);
  backend->health().Set("b", 42);
  backend->health().Set("c", Response::UNKNOWN);
  ProbeResult a = Probe(backend->address(), GrpcSpec("a"));
  EXPECT_FALSE(a.success);
  EXPECT_EQ(a.reason, "grpc status SERVICE_UNKNOWN");
  ProbeResult b = Probe(backend->address(), GrpcSpec("b"));
  EXPECT_FALSE(b.success);
  EXPECT_EQ(b.reason, "grpc status 42 (not a known serving status)");
  ProbeResult c = Probe(backend->address(), GrpcSpec("c"));
  EXPECT_FALSE(c.success);
  EXPECT_EQ(c.reason, "grpc status UNKNOWN");
}

TEST_F(ProbeKindsTest, GrpcWithoutHealthServiceIsHealthyWithAWarning) {
  ASSERT_OK_AND_ASSIGN(auto backend, GrpcBackend::Start(false));
  ProbeResult result = Probe(backend->address(), GrpcSpec());
  EXPECT_TRUE(result.success);
  EXPECT_THAT(result.reason, StartsWith("warning: "));
  EXPECT_THAT(result.reason, HasSubstr("UNIMPLEMENTED"));
  EXPECT_EQ(last_state_, HealthState::kHealthy);
}

TEST_F(ProbeKindsTest, GrpcBlackHoleTimesOut) {
  FakeBackend hole(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t port, hole.Listen());
  HealthCheckSpec spec = GrpcSpec();
  spec.timeout = absl::Milliseconds(200);
  ProbeResult result = Probe(Loopback(port), spec);
  EXPECT_FALSE(result.success);
  EXPECT_EQ(result.reason, "timeout after 200ms (grpc DEADLINE_EXCEEDED)");
  EXPECT_GE(result.latency, absl::Milliseconds(190));
  EXPECT_LT(result.latency, absl::Seconds(5));
}

TEST_F(ProbeKindsTest, GrpcClosedPortIsUnavailable) {
  const int port = testing::PickUnusedPort();
  ProbeResult result = Probe(Loopback(port), GrpcSpec());
  EXPECT_FALSE(result.success);
  EXPECT_THAT(result.reason, StartsWith("grpc UNAVAILABLE: "));
}

TEST_F(ProbeKindsTest, GrpcBackendThatComesBackIsSeenWithinIntervals) {
  // gRPC's default reconnect backoff (up to 120 s) would hide a backend
  // that returns; the prober bounds it by the interval.
  ASSERT_OK_AND_ASSIGN(auto first, GrpcBackend::Start(true));
  const int port = first->port();
  first->health().Set("", Response::SERVING);
  ASSERT_OK_AND_ASSIGN(HealthHandle h,
                       r_.registry->Acquire(Loopback(port), GrpcSpec(), "t"));
  ASSERT_TRUE(recorder_.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kHealthy; }, kWait));
  first.reset();
  ASSERT_TRUE(recorder_.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kUnhealthy; },
      kWait));
  // Same port again.
  testing::ScriptedHealthService service;
  service.Set("", Response::SERVING);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(Loopback(port), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> second = builder.BuildAndStart();
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(recorder_.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kHealthy; },
      absl::Seconds(5)));
  second->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  second->Wait();
}

}  // namespace
}  // namespace aside::server
