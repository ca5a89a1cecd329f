// The response guard on hand-built HTTP/2 byte streams, and the backend
// relay between a real gRPC channel and a real gRPC server on loopback.
#include "server/net/backend_relay.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "server/net/h2_response_guard.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                  std::string_view payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  for (int shift : {16, 8, 0}) f.push_back(static_cast<char>(n >> shift));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int shift : {24, 16, 8, 0}) {
    f.push_back(static_cast<char>(stream >> shift));
  }
  f.append(payload);
  return f;
}

// A gRPC message prefix declaring `length` bytes.
std::string Prefix(uint32_t length, bool compressed = false) {
  std::string p(1, compressed ? '\1' : '\0');
  for (int shift : {24, 16, 8, 0}) {
    p.push_back(static_cast<char>(length >> shift));
  }
  return p;
}

constexpr uint8_t kData = 0, kHeaders = 1, kContinuation = 9;
constexpr uint8_t kEndStream = 1, kEndHeaders = 4, kPadded = 8;

// Feeds `bytes` one at a time: frame and prefix boundaries fall anywhere.
bool ReadByteByByte(H2ResponseGuard& guard, std::string_view bytes) {
  for (char c : bytes) {
    if (!guard.Read(std::string_view(&c, 1))) {
      return false;
    }
  }
  return true;
}

TEST(H2ResponseGuardTest, PassesMessagesWithinTheLimit) {
  H2ResponseGuard guard({.max_message_bytes = 100});
  const std::string stream =
      Frame(4, 0, 0, "") + Frame(kHeaders, kEndHeaders, 1, "hdrs") +
      Frame(kData, 0, 1, Prefix(100) + std::string(60, 'x')) +
      Frame(kData, 0, 1, std::string(40, 'x') + Prefix(3) + "abc") +
      Frame(kHeaders, kEndHeaders | kEndStream, 1, "trailers");
  EXPECT_TRUE(ReadByteByByte(guard, stream)) << guard.why();
  EXPECT_FALSE(guard.failed());
}

TEST(H2ResponseGuardTest, StopsAtAPrefixOverTheLimit) {
  H2ResponseGuard guard({.max_message_bytes = 100});
  // The second message of the stream declares 1 GiB.
  const std::string stream =
      Frame(kHeaders, kEndHeaders, 3, "hdrs") +
      Frame(kData, 0, 3, Prefix(2) + "ab" + Prefix(1u << 30) + "xxxx");
  EXPECT_FALSE(ReadByteByByte(guard, stream));
  EXPECT_EQ(guard.declared(), 1u << 30);
  EXPECT_THAT(guard.why(), HasSubstr("1073741824 bytes"));
}

TEST(H2ResponseGuardTest, PaddingIsNotReadAsAPrefix) {
  H2ResponseGuard guard({.max_message_bytes = 100});
  // Pad length 5, then a whole 3-byte message, then 5 bytes of padding
  // that would declare 4 GiB if read as a prefix.
  const std::string payload =
      std::string(1, '\5') + Prefix(3) + "abc" + std::string(5, '\xff');
  EXPECT_TRUE(
      ReadByteByByte(guard, Frame(kData, kPadded, 1, payload) +
                                Frame(kData, kEndStream, 1, Prefix(1) + "z")))
      << guard.why();
}

TEST(H2ResponseGuardTest, RefusesCompressedMessages) {
  H2ResponseGuard guard({.max_message_bytes = 100});
  EXPECT_FALSE(guard.Read(Frame(kData, 0, 1, Prefix(10, true))));
  EXPECT_THAT(guard.why(), HasSubstr("compressed"));
}

TEST(H2ResponseGuardTest, BoundsAHeaderBlockAcrossContinuations) {
  H2ResponseGuard guard(
      {.max_message_bytes = 100, .max_header_block_bytes = 1000});
  const std::string part(600, 'h');
  EXPECT_TRUE(guard.Read(Frame(kHeaders, 0, 1, part)));
  EXPECT_FALSE(guard.Read(Frame(kContinuation, 0, 1, part)));
  EXPECT_THAT(guard.why(), HasSubstr("header block"));

  // Each block is counted on its own.
  H2ResponseGuard blocks(
      {.max_message_bytes = 100, .max_header_block_bytes = 1000});
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(blocks.Read(
        Frame(kHeaders, kEndHeaders, static_cast<uint32_t>(2 * i + 1), part)));
  }
}

// A generic gRPC server whose every call is answered with `reply_bytes`
// bytes (a message that a parser of any type skips, or fails on; the
// bytes are what matters).
class Answering : public grpc::CallbackGenericService {
 public:
  explicit Answering(size_t reply_bytes) : reply_bytes_(reply_bytes) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(size_t n) {
        grpc::Slice slice(std::string(n, 'x'));
        reply_ = grpc::ByteBuffer(&slice, 1);
        StartRead(&request_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnWriteDone(bool) override {}
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer request_, reply_;
    };
    return new Reactor(reply_bytes_);
  }

 private:
  const size_t reply_bytes_;
};

struct Backend {
  explicit Backend(size_t reply_bytes) : service(reply_bytes) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterCallbackGenericService(&service);
    builder.SetMaxSendMessageSize(-1);
    server = builder.BuildAndStart();
  }
  ~Backend() { server->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }

  Answering service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// One unary call through the relay with a receive limit of `limit` bytes.
grpc::Status Call(const BackendRelay& relay, const std::string& address,
                  uint32_t limit, grpc::ByteBuffer* reply) {
  grpc::ChannelArguments args;
  const std::string target = relay.Route(address, "test", limit, &args);
  grpc::GenericStub stub(grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  grpc::Slice slice(std::string("ping"));
  grpc::ByteBuffer request(&slice, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/test.Echo/Call", grpc::StubOptions(), &request,
                 reply, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

TEST(BackendRelayTest, CarriesCallsWithinTheLimit) {
  absl::StatusOr<std::unique_ptr<BackendRelay>> relay =
      BackendRelay::Start(nullptr);
  ASSERT_TRUE(relay.ok()) << relay.status();
  Backend backend(1000);
  grpc::ByteBuffer reply;
  grpc::Status s = Call(**relay, backend.address(), 4096, &reply);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(reply.Length(), 1000u);
  EXPECT_EQ((*relay)->refused(), 0u);
}

TEST(BackendRelayTest, StopsAnOversizedAnswerBeforeGrpcBuffersIt) {
  absl::StatusOr<std::unique_ptr<BackendRelay>> relay =
      BackendRelay::Start(nullptr);
  ASSERT_TRUE(relay.ok()) << relay.status();
  Backend backend(64 << 20);
  grpc::ByteBuffer reply;
  grpc::Status s = Call(**relay, backend.address(), 4096, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ((*relay)->refused(), 1u);
}

TEST(BackendRelayTest, ABackendThatIsDownFailsTheCall) {
  absl::StatusOr<std::unique_ptr<BackendRelay>> relay =
      BackendRelay::Start(nullptr);
  ASSERT_TRUE(relay.ok()) << relay.status();
  std::string address;
  {
    Backend gone(10);
    address = gone.address();
  }
  grpc::ByteBuffer reply;
  grpc::Status s = Call(**relay, address, 4096, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

// The relay is a proxy for the server's own channels only: a CONNECT
// without its token is refused.
TEST(BackendRelayTest, RefusesAConnectWithoutItsToken) {
  absl::StatusOr<std::unique_ptr<BackendRelay>> relay =
      BackendRelay::Start(nullptr);
  ASSERT_TRUE(relay.ok()) << relay.status();
  Backend backend(10);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>((*relay)->port()));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  const std::string request = absl::StrCat(
      "CONNECT ", backend.address(), " HTTP/1.1\r\nHost: ", backend.address(),
      "\r\naside-relay: guess test 10\r\n\r\n");
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  char buffer[256] = {};
  const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
  close(fd);
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buffer, static_cast<size_t>(n)), HasSubstr("403"));
}

}  // namespace
}  // namespace aside::server
