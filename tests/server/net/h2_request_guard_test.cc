// The request guard on hand-built HTTP/2 byte streams (RFC 9113 frames,
// gRPC's message prefix): what reaches gRPC, what the client gets back;
// and the relay's peer names.
#include "server/net/h2_request_guard.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "server/base/client_peer.h"
#include "server/net/guarded_relay.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                  std::string_view payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  f.push_back(static_cast<char>(stream >> 24));
  f.push_back(static_cast<char>(stream >> 16));
  f.push_back(static_cast<char>(stream >> 8));
  f.push_back(static_cast<char>(stream));
  f.append(payload);
  return f;
}

// A gRPC message prefix declaring `length` bytes, and `body`.
std::string Message(uint32_t length, std::string_view body = "") {
  std::string m = {0, static_cast<char>(length >> 24),
                   static_cast<char>(length >> 16),
                   static_cast<char>(length >> 8), static_cast<char>(length)};
  m.append(body);
  return m;
}

std::string Headers(uint32_t stream, uint8_t flags = 0x4) {
  return Frame(0x1, flags, stream, "\x83\x86");  // an opaque header block
}
std::string Data(uint32_t stream, std::string_view payload, uint8_t flags = 0) {
  return Frame(0x0, flags, stream, payload);
}
std::string ServerSettings() { return Frame(0x4, 0, 0, ""); }

struct Frames {
  struct F {
    uint8_t type;
    uint8_t flags;
    uint32_t stream;
    std::string payload;
  };
  std::vector<F> list;
  static Frames Parse(std::string_view bytes) {
    Frames out;
    while (bytes.size() >= 9) {
      const auto* h = reinterpret_cast<const uint8_t*>(bytes.data());
      const uint32_t n = (h[0] << 16) | (h[1] << 8) | h[2];
      F f{h[3], h[4],
          ((uint32_t{h[5]} << 24) | (h[6] << 16) | (h[7] << 8) | h[8]) &
              0x7fffffff,
          std::string(bytes.substr(9, n))};
      out.list.push_back(f);
      bytes.remove_prefix(9 + n);
    }
    return out;
  }
};

class GuardTest : public ::testing::Test {
 protected:
  GuardTest() : guard_({.max_message_bytes = 1024}) {
    // Connection start: the client's preface and SETTINGS, the server's.
    Client(std::string(kPreface) + Frame(0x4, 0, 0, ""));
    Server(ServerSettings());
    to_server_.clear();
    to_client_.clear();
  }
  void Client(std::string_view bytes) {
    guard_.FromClient(bytes, &to_server_, &to_client_);
  }
  void Server(std::string_view bytes) { guard_.FromServer(bytes, &to_client_); }

  H2RequestGuard guard_;
  std::string to_server_;
  std::string to_client_;
};

TEST_F(GuardTest, RequestsWithinTheLimitPassUnchanged) {
  const std::string bytes =
      Headers(1) + Data(1, Message(1024, std::string(1024, 'x')), 0x1) +
      Headers(3) + Data(3, Message(3, "abc")) + Data(3, Message(0), 0x1);
  // Byte by byte: frames split anywhere are held until whole.
  for (char c : bytes) {
    Client(std::string_view(&c, 1));
  }
  EXPECT_EQ(to_server_, bytes);
  EXPECT_THAT(to_client_, IsEmpty());
  EXPECT_EQ(guard_.refused(), 0u);
  EXPECT_EQ(guard_.tracked_streams(), 0u);  // both ended
}

TEST_F(GuardTest, AnOversizedPrefixEndsTheCallBeforeGrpcSeesItsBytes) {
  Client(Headers(1) + Data(1, Message(1u << 30, std::string(100, 'x'))));
  EXPECT_EQ(guard_.refused(), 1u);
  EXPECT_EQ(guard_.largest_refused(), 1u << 30);
  // gRPC: the headers, then a cancel; never the data.
  Frames to_grpc = Frames::Parse(to_server_);
  ASSERT_EQ(to_grpc.list.size(), 2u);
  EXPECT_EQ(to_grpc.list[0].type, 0x1);
  EXPECT_EQ(to_grpc.list[1].type, 0x3);  // RST_STREAM
  EXPECT_EQ(to_grpc.list[1].payload, std::string("\0\0\0\x8", 4));  // CANCEL
  // The client: its window back, a trailers-only RESOURCE_EXHAUSTED, and
  // the stream closed.
  Frames back = Frames::Parse(to_client_);
  ASSERT_EQ(back.list.size(), 3u);
  EXPECT_EQ(back.list[0].type, 0x8);  // WINDOW_UPDATE on the connection
  EXPECT_EQ(back.list[0].stream, 0u);
  EXPECT_EQ(back.list[0].payload, std::string("\0\0\0\x69", 4));  // 105
  EXPECT_EQ(back.list[1].type, 0x1);
  EXPECT_EQ(back.list[1].flags, 0x5);  // END_STREAM | END_HEADERS
  EXPECT_EQ(back.list[1].stream, 1u);
  EXPECT_EQ(static_cast<uint8_t>(back.list[1].payload[0]),
            0x88);  // :status 200
  EXPECT_THAT(back.list[1].payload, HasSubstr("grpc-status\x01"
                                              "8"));
  EXPECT_THAT(back.list[1].payload,
              HasSubstr("request message of 1073741824 bytes is larger than "
                        "limits.max_receive_message_bytes (1024 bytes)"));
  EXPECT_EQ(back.list[2].type, 0x3);
  EXPECT_EQ(back.list[2].payload, std::string("\0\0\0\0", 4));  // NO_ERROR
  // The rest of the message no longer counts: gRPC drops a closed stream's
  // frames itself.
  to_server_.clear();
  Client(Data(1, std::string(100, 'y')));
  EXPECT_EQ(guard_.refused(), 1u);
}

TEST_F(GuardTest, AnOversizedSecondMessageOfAStreamIsFound) {
  Client(Headers(1) + Data(1, Message(10, "0123456789") + Message(2000)));
  EXPECT_EQ(guard_.refused(), 1u);
  EXPECT_EQ(guard_.largest_refused(), 2000u);
}

TEST_F(GuardTest, APrefixSplitAcrossFramesIsRead) {
  const std::string m = Message(5000);
  Client(Headers(1) + Data(1, m.substr(0, 2)));
  EXPECT_EQ(guard_.refused(), 0u);
  Client(Data(1, m.substr(2)));
  EXPECT_EQ(guard_.refused(), 1u);
}

TEST_F(GuardTest, PaddingIsNotTakenForMessageBytes) {
  // PADDED: a pad length byte, the data, then the padding (zeros that
  // would read as an empty message's prefix).
  std::string payload =
      std::string(1, 4) + Message(3, "abc") + std::string(4, '\0');
  Client(Headers(1) + Frame(0x0, 0x8, 1, payload) + Data(1, Message(2000)));
  EXPECT_EQ(guard_.refused(), 1u);
  EXPECT_EQ(guard_.largest_refused(), 2000u);
}

TEST_F(GuardTest, AfterTheResponseHeadersTheRefusalIsTrailersOnly) {
  Client(Headers(1));
  Server(Headers(1));  // a streaming call's response headers
  to_client_.clear();
  Client(Data(1, Message(4096)));
  Frames back = Frames::Parse(to_client_);
  ASSERT_EQ(back.list.size(), 3u);
  ASSERT_EQ(back.list[1].type, 0x1);
  EXPECT_NE(static_cast<uint8_t>(back.list[1].payload[0]), 0x88);
  EXPECT_THAT(back.list[1].payload, Not(HasSubstr("content-type")));
  EXPECT_THAT(back.list[1].payload, HasSubstr("grpc-status"));
}

TEST_F(GuardTest, OwnFramesWaitForTheEndOfTheServersFrame) {
  Client(Headers(1));
  const std::string response = Data(1, std::string(50, 'r'));
  Server(response.substr(0, 20));  // half a frame from gRPC
  to_client_.clear();
  Client(Data(1, Message(4096)));
  EXPECT_THAT(to_client_, IsEmpty());  // not inside gRPC's frame
  Server(response.substr(20));
  EXPECT_EQ(to_client_.substr(0, response.size() - 20), response.substr(20));
  Frames back = Frames::Parse(to_client_.substr(response.size() - 20));
  EXPECT_EQ(back.list.size(), 3u);
}

TEST(GuardStartTest, NothingIsSentBeforeTheServersSettings) {
  H2RequestGuard guard({.max_message_bytes = 1024});
  std::string to_server;
  std::string to_client;
  guard.FromClient(std::string(kPreface) + Frame(0x4, 0, 0, "") + Headers(1) +
                       Data(1, Message(5000)),
                   &to_server, &to_client);
  EXPECT_EQ(guard.refused(), 1u);
  EXPECT_THAT(to_client, IsEmpty());
  guard.FromServer(ServerSettings(), &to_client);
  Frames back = Frames::Parse(to_client);
  ASSERT_EQ(back.list.size(), 4u);
  EXPECT_EQ(back.list[0].type, 0x4);  // the server's SETTINGS first
}

TEST(GuardStartTest, WhatIsNotHttp2PassesForGrpcToRefuse) {
  H2RequestGuard guard({.max_message_bytes = 1024});
  std::string to_server;
  std::string to_client;
  guard.FromClient("GET / HTTP/1.1\r\n\r\n", &to_server, &to_client);
  EXPECT_TRUE(guard.passthrough());
  EXPECT_EQ(to_server, "GET / HTTP/1.1\r\n\r\n");
}

TEST_F(GuardTest, AFrameLargerThanAnnouncedPassesForGrpcToRefuse) {
  const std::string big = Data(1, std::string(20000, 'x'));
  Client(Headers(1) + big);
  EXPECT_TRUE(guard_.passthrough());
  EXPECT_EQ(guard_.held(), 0u);
  EXPECT_THAT(to_server_, HasSubstr(big));
}

TEST_F(GuardTest, ALargerAnnouncedFrameSizeIsHonoured) {
  // SETTINGS_MAX_FRAME_SIZE (5) = 65536.
  Server(Frame(0x4, 0, 0, std::string("\0\x05\0\x01\0\0", 6)));
  Client(Headers(1) + Data(1, Message(20000, std::string(20000, 'x'))));
  EXPECT_FALSE(guard_.passthrough());
  EXPECT_EQ(guard_.refused(), 1u);
}

TEST_F(GuardTest, StreamsEndedByEitherSideAreForgotten) {
  Client(Headers(1) + Headers(3) + Headers(5) + Headers(7));
  EXPECT_EQ(guard_.tracked_streams(), 4u);
  Server(Frame(0x3, 0, 1, std::string(4, '\0')));    // gRPC resets 1
  Server(Headers(3, 0x5));                           // trailers-only for 3
  Client(Frame(0x3, 0, 5, std::string(4, '\x08')));  // the client cancels 5
  Client(Headers(7, 0x5));                           // trailers end 7
  EXPECT_EQ(guard_.tracked_streams(), 0u);
}

TEST(GuardStartTest, TooManyOpenStreamsFailTheConnection) {
  H2RequestGuard guard({.max_message_bytes = 1024, .max_streams = 10});
  std::string to_server;
  std::string to_client;
  std::string bytes = std::string(kPreface) + Frame(0x4, 0, 0, "");
  for (uint32_t id = 1; id <= 21; id += 2) {
    bytes += Headers(id);
  }
  guard.FromClient(bytes, &to_server, &to_client);
  EXPECT_TRUE(guard.failed());
}

// A connection past its preface and SETTINGS with a reset budget of
// `max_resets`, refilled at `per_second`, on a pinned clock.
class ResetBudgetTest : public ::testing::Test {
 protected:
  ResetBudgetTest()
      : guard_({.max_message_bytes = 1024,
                .max_resets = 4,
                .resets_per_second = 2}) {
    guard_.set_now_for_test(now_);
    Client(std::string(kPreface) + Frame(0x4, 0, 0, ""));
    guard_.FromServer(ServerSettings(), &to_client_);
    to_server_.clear();
    to_client_.clear();
  }
  void Client(std::string_view bytes) {
    guard_.FromClient(bytes, &to_server_, &to_client_);
  }
  // Opens stream `id` and resets it at once.
  void OpenAndReset(uint32_t id) {
    Client(Headers(id) + Frame(0x3, 0, id, std::string("\0\0\0\x08", 4)));
  }
  void Advance(std::chrono::milliseconds d) {
    now_ += d;
    guard_.set_now_for_test(now_);
  }
  static int Resets(std::string_view bytes) {
    int n = 0;
    for (const auto& f : Frames::Parse(bytes).list) {
      n += f.type == 0x3 ? 1 : 0;
    }
    return n;
  }

  H2RequestGuard::Clock::time_point now_{std::chrono::seconds(1000)};
  H2RequestGuard guard_;
  std::string to_server_;
  std::string to_client_;
};

TEST_F(ResetBudgetTest, ResetsWithinTheBudgetPass) {
  for (uint32_t id = 1; id <= 7; id += 2) {
    OpenAndReset(id);
  }
  EXPECT_FALSE(guard_.failed());
  EXPECT_EQ(Resets(to_server_), 4);
  EXPECT_THAT(to_client_, IsEmpty());
}

TEST_F(ResetBudgetTest, TheFirstResetPastTheBudgetEndsTheConnection) {
  for (uint32_t id = 1; id <= 11; id += 2) {
    OpenAndReset(id);
  }
  EXPECT_TRUE(guard_.failed());
  EXPECT_TRUE(guard_.reset_budget_spent());
  // gRPC saw the four resets of the budget and the fifth stream's HEADERS,
  // never the fifth reset nor anything after it.
  EXPECT_EQ(Resets(to_server_), 4);
  EXPECT_EQ(Frames::Parse(to_server_).list.back().stream, 9u);
  // The client got GOAWAY(ENHANCE_YOUR_CALM) naming the limit, the last
  // stream it opened as the last one processed.
  const Frames got = Frames::Parse(to_client_);
  ASSERT_EQ(got.list.size(), 1u);
  EXPECT_EQ(got.list[0].type, 0x7);
  EXPECT_EQ(got.list[0].stream, 0u);
  EXPECT_EQ(got.list[0].payload.substr(0, 8),
            std::string("\0\0\0\x09\0\0\0\x0b", 8));
  EXPECT_THAT(got.list[0].payload, HasSubstr("limits.max_stream_resets"));
}

TEST_F(ResetBudgetTest, TheBudgetRefillsAtItsRate) {
  for (uint32_t id = 1; id <= 7; id += 2) {
    OpenAndReset(id);
  }
  Advance(std::chrono::milliseconds(1000));  // two resets given back
  OpenAndReset(9);
  OpenAndReset(11);
  EXPECT_FALSE(guard_.failed());
  Advance(std::chrono::milliseconds(400));  // 0.8 of one: not yet
  OpenAndReset(13);
  EXPECT_TRUE(guard_.failed());
}

TEST_F(ResetBudgetTest, AnIdleConnectionRefillsNoFurtherThanTheBudget) {
  Advance(std::chrono::hours(1));
  for (uint32_t id = 1; id <= 9; id += 2) {
    OpenAndReset(id);
  }
  EXPECT_TRUE(guard_.failed());
  EXPECT_EQ(Resets(to_server_), 4);
}

TEST(GuardStartTest, WithoutABudgetResetsAreNotCounted) {
  H2RequestGuard guard({.max_message_bytes = 1024});
  std::string to_server;
  std::string to_client;
  std::string bytes = std::string(kPreface) + Frame(0x4, 0, 0, "");
  for (uint32_t id = 1; id <= 20001; id += 2) {
    bytes += Headers(id) + Frame(0x3, 0, id, std::string("\0\0\0\x08", 4));
  }
  guard.FromClient(bytes, &to_server, &to_client);
  EXPECT_FALSE(guard.failed());
  EXPECT_EQ(to_server, bytes);
}

}  // namespace
}  // namespace aside::server

namespace aside::server {
namespace {

TEST(ClientPeerTest, TheRelaysSocketNameGivesTheClientsAddressBack) {
  EXPECT_EQ(ClientPeer("unix-abstract:aside-relay/4242/grpc/17/"
                       "ipv4:10.0.0.7:51234"),
            "ipv4:10.0.0.7:51234");
  EXPECT_EQ(ClientPeer("unix-abstract:aside-relay/1/health/2/ipv6:[::1]:80"),
            "ipv6:[::1]:80");
  // Anything else is what gRPC said.
  EXPECT_EQ(ClientPeer("ipv4:127.0.0.1:5"), "ipv4:127.0.0.1:5");
  EXPECT_EQ(ClientPeer("unix:/run/aside.sock"), "unix:/run/aside.sock");
  EXPECT_EQ(ClientPeer("unix-abstract:aside-relay/broken"),
            "unix-abstract:aside-relay/broken");
}

TEST(ClientPeerTest, AddressesAreWrittenAsGrpcWritesThem) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(8080);
  inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
  EXPECT_EQ(GrpcPeerString(reinterpret_cast<sockaddr*>(&v4), sizeof(v4)),
            "ipv4:10.1.2.3:8080");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(443);
  inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
  EXPECT_EQ(GrpcPeerString(reinterpret_cast<sockaddr*>(&v6), sizeof(v6)),
            "ipv6:[2001:db8::1]:443");
  inet_pton(AF_INET6, "::ffff:192.0.2.9", &v6.sin6_addr);
  EXPECT_EQ(GrpcPeerString(reinterpret_cast<sockaddr*>(&v6), sizeof(v6)),
            "ipv4:192.0.2.9:443");
}

}  // namespace
}  // namespace aside::server

namespace aside::server {
namespace {

// Streams counted against a peer's cap, whatever their service: one past it
// is refused at its HEADERS, whose header block still reaches gRPC whole
// (its HPACK state) before the reset; a stream that ends frees its place.
TEST(StreamCapTest, AStreamPastThePeersCapIsRefusedAfterItsHeaderBlock) {
  auto peer = std::make_shared<StreamCount>(2);
  auto all = std::make_shared<StreamCount>(100);
  H2RequestGuard guard({.max_message_bytes = 1024}, nullptr, peer, all);
  std::string to_server, to_client;
  guard.FromClient(std::string(kPreface) + Frame(0x4, 0, 0, ""), &to_server,
                   &to_client);
  guard.FromServer(ServerSettings(), &to_client);
  to_server.clear();
  to_client.clear();

  guard.FromClient(Headers(1) + Headers(3), &to_server, &to_client);
  EXPECT_EQ(peer->open(), 2u);
  EXPECT_EQ(all->open(), 2u);
  // The third, split over a HEADERS and a CONTINUATION frame, byte by byte.
  const std::string third =
      Headers(5, /*flags=*/0) + Frame(0x9, 0x4, 5, "\x84");
  for (char c : third) {
    guard.FromClient(std::string_view(&c, 1), &to_server, &to_client);
  }
  EXPECT_EQ(guard.refused_peer_streams(), 1u);
  EXPECT_EQ(peer->open(), 2u);
  Frames to_grpc = Frames::Parse(to_server);
  ASSERT_EQ(to_grpc.list.size(), 5u);
  EXPECT_EQ(to_grpc.list[2].type, 0x1);  // the refused stream's HEADERS,
  EXPECT_EQ(to_grpc.list[3].type, 0x9);  // its CONTINUATION,
  EXPECT_EQ(to_grpc.list[4].type, 0x3);  // then its reset
  EXPECT_EQ(to_grpc.list[4].stream, 5u);
  Frames back = Frames::Parse(to_client);
  ASSERT_EQ(back.list.size(), 2u);
  EXPECT_EQ(back.list[0].stream, 5u);
  EXPECT_THAT(back.list[0].payload,
              HasSubstr("too many streams open at once: 2 "
                        "(limits.max_streams_per_peer)"));

  // Stream 1 ends (the server's trailers): a new stream fits again.
  to_server.clear();
  guard.FromServer(Headers(1, 0x5), &to_client);
  EXPECT_EQ(peer->open(), 1u);
  guard.FromClient(Headers(7), &to_server, &to_client);
  EXPECT_EQ(peer->open(), 2u);
  EXPECT_EQ(guard.refused_peer_streams(), 1u);
  // A reset from the client ends one too.
  guard.FromClient(Frame(0x3, 0, 3, std::string("\0\0\0\x8", 4)), &to_server,
                   &to_client);
  EXPECT_EQ(peer->open(), 1u);
}

TEST(StreamCapTest, TheConnectionsStreamsAreGivenBackWhenItCloses) {
  auto peer = std::make_shared<StreamCount>(10);
  auto all = std::make_shared<StreamCount>(2);
  {
    H2RequestGuard guard({.max_message_bytes = 1024}, nullptr, peer, all);
    std::string to_server, to_client;
    guard.FromClient(std::string(kPreface) + Frame(0x4, 0, 0, ""), &to_server,
                     &to_client);
    guard.FromServer(ServerSettings(), &to_client);
    guard.FromClient(Headers(1) + Headers(3) + Headers(5), &to_server,
                     &to_client);
    // The port's cap: the peer's count is given back for the refused one.
    EXPECT_EQ(guard.refused_all_streams(), 1u);
    EXPECT_EQ(peer->open(), 2u);
    EXPECT_EQ(all->open(), 2u);
  }
  EXPECT_EQ(peer->open(), 0u);
  EXPECT_EQ(all->open(), 0u);
}

}  // namespace
}  // namespace aside::server
