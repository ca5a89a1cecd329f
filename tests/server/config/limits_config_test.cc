// The HTTP/2 abuse limits under `limits:` (docs/hardening.md#http2-abuse):
// defaults, accepted values, and every bad value refused with file:line
// and the key, table-driven.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/config/config.h"
#include "server/config_reloader.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(LimitsConfigTest, Defaults) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseConfig("", "aside.yaml"));
  EXPECT_EQ(c.max_connection_age, absl::Minutes(30));
  EXPECT_EQ(c.max_connection_age_grace, absl::Minutes(1));
  EXPECT_EQ(c.min_ping_interval, absl::Seconds(10));
  EXPECT_EQ(c.max_ping_strikes, 2u);
  EXPECT_EQ(c.max_metadata_bytes, 8192u);
  EXPECT_EQ(c.max_watch_streams_per_peer, 10000u);
  EXPECT_EQ(c.max_balancer_streams_per_peer, 10000u);
  EXPECT_EQ(c.max_connections, 0u);  // the open-file limit's budget
  EXPECT_EQ(c.max_connections_per_peer, 1024u);
}

TEST(LimitsConfigTest, AcceptedValues) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseConfig(R"(limits:
  max_connection_age: 0s
  max_connection_age_grace: 30s
  min_ping_interval: 1s
  max_ping_strikes: 0
  max_metadata_bytes: 16384
  max_watch_streams_per_peer: 3
  max_balancer_streams_per_peer: 4
  max_connections: 5000
  max_connections_per_peer: 0
)",
                                                   "aside.yaml"));
  EXPECT_EQ(c.max_connection_age, absl::ZeroDuration());  // off
  EXPECT_EQ(c.max_connection_age_grace, absl::Seconds(30));
  EXPECT_EQ(c.min_ping_interval, absl::Seconds(1));
  EXPECT_EQ(c.max_ping_strikes, 0u);
  EXPECT_EQ(c.max_metadata_bytes, 16384u);
  EXPECT_EQ(c.max_watch_streams_per_peer, 3u);
  EXPECT_EQ(c.max_balancer_streams_per_peer, 4u);
  EXPECT_EQ(c.max_connections, 5000u);
  EXPECT_EQ(c.max_connections_per_peer, 0u);  // off
}

struct BadLimit {
  const char* yaml;      // the line under `limits:`
  const char* expected;  // in the error, after "aside.yaml:2:"
};

TEST(LimitsConfigTest, BadValuesNameFileLineAndKey) {
  const BadLimit cases[] = {
      {"max_connection_age: 500ms",
       "limits.max_connection_age: out of range 0 (off) or 1s..168h"},
      {"max_connection_age: -1s", "limits.max_connection_age"},
      {"max_connection_age: soon", "limits.max_connection_age"},
      {"max_connection_age_grace: 1ms",
       "limits.max_connection_age_grace: out of range 0 (off) or 100ms..24h"},
      {"min_ping_interval: 0s",
       "limits.min_ping_interval: out of range 100ms..2h"},
      {"min_ping_interval: 3h", "limits.min_ping_interval"},
      {"max_ping_strikes: 1001",
       "limits.max_ping_strikes: 1001 out of range 0..1000"},
      {"max_ping_strikes: many", "limits.max_ping_strikes"},
      {"max_metadata_bytes: 100",
       "limits.max_metadata_bytes: 100 out of range 1024..1048576"},
      {"max_watch_streams_per_peer: 0",
       "limits.max_watch_streams_per_peer: 0 out of range 1..1000000"},
      {"max_watch_streams_per_peer: -5", "limits.max_watch_streams_per_peer"},
      {"max_balancer_streams_per_peer: 0",
       "limits.max_balancer_streams_per_peer: 0 out of range 1..1000000"},
      {"max_stream_count: 5", "limits.max_stream_count: unknown key"},
      {"max_streams_per_peer: 10000001",
       "limits.max_streams_per_peer: 10000001 out of range 0..10000000"},
      {"max_streams: -1", "limits.max_streams"},
      {"max_connections: 0",
       "limits.max_connections: 0 out of range 1..10000000"},
      {"max_connections: lots", "limits.max_connections"},
      {"max_connections_per_peer: 10000001",
       "limits.max_connections_per_peer: 10000001 out of range 0..10000000"},
      {"max_connections_per_peer: -1", "limits.max_connections_per_peer"},
  };
  for (const BadLimit& c : cases) {
    absl::StatusOr<ServerConfig> parsed =
        ParseConfig(absl::StrCat("limits:\n  ", c.yaml, "\n"), "aside.yaml");
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("aside.yaml:2:"))
        << c.yaml;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.expected)) << c.yaml;
  }
}

TEST(LimitsConfigTest, ChangesNeedARestart) {
  ASSERT_OK_AND_ASSIGN(ServerConfig a, ParseConfig("", "aside.yaml"));
  ASSERT_OK_AND_ASSIGN(
      ServerConfig b,
      ParseConfig("limits: {max_ping_strikes: 5, max_watch_streams_per_peer: "
                  "7, handshake_timeout: 2s, max_balancer_streams_per_peer: "
                  "9, max_connections: 100, max_connections_per_peer: 10}\n",
                  "aside.yaml"));
  const std::vector<std::string> keys = RestartOnlyChanges(a, b);
  EXPECT_THAT(keys, Contains("limits.max_ping_strikes"));
  EXPECT_THAT(keys, Contains("limits.max_watch_streams_per_peer"));
  EXPECT_THAT(keys, Contains("limits.handshake_timeout"));
  EXPECT_THAT(keys, Contains("limits.max_balancer_streams_per_peer"));
  EXPECT_THAT(keys, Contains("limits.max_connections"));
  EXPECT_THAT(keys, Contains("limits.max_connections_per_peer"));
}

}  // namespace
}  // namespace aside::server
