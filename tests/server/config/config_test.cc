#include "server/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/yaml/yaml_reader.h"
#include "server/config_reloader.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<ServerConfig> Parse(absl::string_view text) {
  return ParseConfig(text, "aside.yaml");
}

// The message of a config error, for matching.
std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<ServerConfig> c = Parse(text);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigTest, EmptyFileIsAnEmptyConfigWithDefaults) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse(""));
  EXPECT_EQ(c.listen, "0.0.0.0:50051");
  EXPECT_EQ(c.metrics, "0.0.0.0:9464");
  EXPECT_EQ(c.max_receive_message_bytes, 4u * 1024 * 1024);
  EXPECT_TRUE(c.groups.empty());
}

TEST(ConfigTest, ParsesAFullGroup) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse(R"(
listen: 127.0.0.1:0
metrics: ""
shutdown_grace: 2s
groups:
  - name: payments
    policy: {name: weighted_round_robin}
    panic_threshold: 30
    slow_start: 1m
    health_check:
      kind: http
      interval: 500ms
      timeout: 200ms
      rise: 1
      fall: 2
      http: {path: /healthz, expected_statuses: ["200-299", 404]}
    backends:
      - 10.0.0.1:8080
      - address: "[::1]:9090"
        weight: 0
        locality: {region: eu, zone: eu-1a}
        metadata: {version: v2}
        drained: true
)"));
  EXPECT_EQ(c.listen, "127.0.0.1:0");
  EXPECT_EQ(c.metrics, "");
  EXPECT_EQ(c.shutdown_grace, absl::Seconds(2));
  ASSERT_EQ(c.groups.size(), 1u);
  const GroupSpec& g = c.groups[0];
  EXPECT_EQ(g.name, "payments");
  EXPECT_EQ(g.policy.kind, PolicyKind::kWeightedRoundRobin);
  EXPECT_EQ(g.panic_threshold, 30);
  EXPECT_EQ(g.slow_start, absl::Minutes(1));
  EXPECT_EQ(g.health_check.kind, HealthCheckSpec::Kind::kHttp);
  EXPECT_EQ(g.health_check.interval, absl::Milliseconds(500));
  EXPECT_EQ(g.health_check.http_path, "/healthz");
  ASSERT_EQ(g.health_check.http_expected_statuses.size(), 2u);
  EXPECT_EQ(g.health_check.http_expected_statuses[1].from, 404u);
  ASSERT_EQ(g.backends.size(), 2u);
  EXPECT_EQ(g.backends[0].address, "10.0.0.1:8080");
  EXPECT_EQ(g.backends[0].weight, 100u);
  EXPECT_EQ(g.backends[1].address, "[::1]:9090");
  EXPECT_EQ(g.backends[1].weight, 0u);
  EXPECT_EQ(g.backends[1].locality.zone, "eu-1a");
  EXPECT_EQ(g.backends[1].metadata.at("version"), "v2");
  EXPECT_TRUE(g.backends[1].drained);
  EXPECT_EQ(g.source, GroupSource::kFile);
  EXPECT_EQ(g.file, "aside.yaml");
}

TEST(ConfigTest, ParsesPolicyParameters) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse(R"(
groups:
  - name: a
    policy: {name: ketama, points_per_weight: 40}
  - name: b
    policy: {name: sticky, ttl: 30m, fallback: {name: p2c, load: peak_ewma, decay: 5s}}
  - name: c
    policy: {name: locality, remote_probe_fraction: 0.05, child: least_time}
)"));
  EXPECT_EQ(c.groups[0].policy.ketama.points_per_weight, 40u);
  EXPECT_EQ(c.groups[1].policy.sticky.ttl, absl::Minutes(30));
  ASSERT_NE(c.groups[1].policy.child, nullptr);
  EXPECT_EQ(c.groups[1].policy.child->kind, PolicyKind::kP2c);
  EXPECT_EQ(c.groups[1].policy.child->p2c.load, P2cParams::Load::kPeakEwma);
  EXPECT_EQ(c.groups[1].policy.child->p2c.decay, absl::Seconds(5));
  EXPECT_EQ(c.groups[2].policy.locality.remote_probe_fraction, 0.05);
  EXPECT_EQ(c.groups[2].policy.child->kind, PolicyKind::kLeastTime);
}

TEST(ConfigTest, ErrorsNameFileLineAndKey) {
  const std::string e = ErrorOf(R"(groups:
  - name: web
    backends:
      - address: 10.0.0.1:80
        weight: 20000
)");
  EXPECT_THAT(e, HasSubstr("aside.yaml:5:17: groups[0].backends[0].weight: "
                           "20000 out of range 0..10000"));
}

TEST(ConfigTest, UnknownKeysAreErrors) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    polcy: round_robin\n"),
              HasSubstr("aside.yaml:3:5: groups[0].polcy: unknown key"));
  EXPECT_THAT(ErrorOf("listen_addr: 1.2.3.4:5\n"),
              HasSubstr("aside.yaml:1:1: listen_addr: unknown key"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: k\n    policy: {name: round_robin, "
                      "points_per_weight: 3}\n"),
              HasSubstr("groups[0].policy.points_per_weight: unknown key"));
}

TEST(ConfigTest, WrongTypes) {
  EXPECT_THAT(ErrorOf("groups: {name: web}\n"),
              HasSubstr("groups: expected a list of groups"));
  EXPECT_THAT(
      ErrorOf("groups:\n  - name: web\n    backends:\n      - address: "
              "10.0.0.1:80\n        weight: heavy\n"),
      HasSubstr("weight: expected a non-negative integer, got 'heavy'"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    backends:\n      - address: "
                      "10.0.0.1:80\n        weight: -1\n"),
              HasSubstr("weight: expected a non-negative integer, got '-1'"));
  EXPECT_THAT(
      ErrorOf("groups:\n  - name: web\n    health_check: {interval: 5}\n"),
      HasSubstr("needs a unit"));
  EXPECT_THAT(
      ErrorOf("groups:\n  - name: web\n    health_check: {rise: [1]}\n"),
      HasSubstr("health_check.rise: expected an integer"));
}

TEST(ConfigTest, BadAddressesAndPorts) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    backends: [10.0.0.1]\n"),
              HasSubstr("aside.yaml:3:16: groups[0].backends[0].address: "
                        "address '10.0.0.1': missing ':port'"));
  EXPECT_THAT(
      ErrorOf("groups:\n  - name: web\n    backends: [10.0.0.1:99999]\n"),
      HasSubstr("out of range 1..65535"));
  EXPECT_THAT(ErrorOf("listen: nowhere\n"), HasSubstr("listen: address"));
  EXPECT_THAT(
      ErrorOf("groups:\n  - name: web\n    backends: [db.internal:80]\n"),
      HasSubstr("is a host name"));
}

TEST(ConfigTest, DuplicateBackendsAndGroups) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    backends: [10.0.0.1:80, "
                      "10.0.0.2:80, 10.0.0.1:80]\n"),
              HasSubstr("aside.yaml:3:42: groups[0].backends[2].address: "
                        "10.0.0.1:80 is listed twice (also backends[0])"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n  - name: web\n"),
              HasSubstr("aside.yaml:3:11: groups[1].name: duplicate group "
                        "'web' (also groups[0])"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    name: api\n"),
              HasSubstr("groups[0].name: key given twice"));
}

TEST(ConfigTest, UnknownPolicyNames) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    policy: fastest\n"),
              HasSubstr("aside.yaml:3:13: groups[0].policy: unknown policy "
                        "'fastest'"));
}

TEST(ConfigTest, BadNames) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: Web\n"),
              HasSubstr("groups[0].name: group name 'Web' must match"));
  EXPECT_THAT(ErrorOf("groups:\n  - backends: []\n"),
              HasSubstr("groups[0]: missing key 'name'"));
}

TEST(ConfigTest, CrossFieldErrorsPointAtTheField) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    health_check:\n      "
                      "interval: 1s\n      timeout: 2s\n"),
              HasSubstr("aside.yaml:5:16: groups[0].health_check.timeout: 2s "
                        "out of range"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    policy: {name: maglev, "
                      "table_size: 1000}\n"),
              HasSubstr("groups[0].policy.maglev.table_size: 1000 is not a "
                        "prime"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    policy: {name: ring_hash, "
                      "min_ring_size: 0}\n"),
              HasSubstr("groups[0].policy.ring_hash.min_ring_size: 0 out of "
                        "range 1..4096"));
  EXPECT_THAT(ErrorOf("groups:\n  - name: web\n    health_check: {kind: "
                      "http, http: {path: \"/a\\r\\nb\"}}\n"),
              HasSubstr("health_check.http.path"));
}

TEST(ConfigTest, RangeErrorsOfTheValidatorPointAtTheirLine) {
  // Ranges are the schema's (ValidateGroupSpec); the reader only checks
  // that jitter is a number, and the error's field path leads back here.
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: web
    backends: [10.0.0.1:80]
    health_check:
      kind: tcp
      jitter: 0.9
)"),
              HasSubstr("aside.yaml:6:15: groups[0].health_check.jitter: 0.9 "
                        "out of range 0..0.5"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: web
  - name: api
    policy:
      name: ketama
      points_per_weight: 0
)"),
              HasSubstr("aside.yaml:6:26: groups[1].policy.ketama."
                        "points_per_weight: 0 out of range 1..1000"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: web
    policy: {name: sticky, fallback: {name: p2c, decay: 2h}}
)"),
              HasSubstr("aside.yaml:3:57: groups[0].policy.sticky.fallback."
                        "p2c.decay: 2h out of range 1ms..1h"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: web
    health_check:
      kind: http
      http: {expected_statuses: ["200-299", 700]}
)"),
              HasSubstr("aside.yaml:5:45: groups[0].health_check.http."
                        "expected_statuses[1]: 700-700 is not a range "
                        "within 100..599"));
}

TEST(ConfigTest, OutlierSectionMeansEnabledUnlessSaidOtherwise) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse(R"(
groups:
  - name: a
    outlier_detection: {consecutive_failures: 7}
  - name: b
    outlier_detection: {enabled: false}
  - name: c
)"));
  EXPECT_TRUE(c.groups[0].outlier.enabled);
  EXPECT_EQ(c.groups[0].outlier.consecutive_failures, 7u);
  EXPECT_FALSE(c.groups[1].outlier.enabled);
  EXPECT_FALSE(c.groups[2].outlier.enabled);
}

TEST(ConfigTest, ListsEveryError) {
  const std::string e = ErrorOf(R"(groups:
  - name: a
    backends: [10.0.0.1]
  - name: b
    policy: nope
  - name: c
    bogus: 1
)");
  EXPECT_THAT(e, HasSubstr("groups[0].backends[0]"));
  EXPECT_THAT(e, HasSubstr("groups[1].policy"));
  EXPECT_THAT(e, HasSubstr("groups[2].bogus"));
}

TEST(ConfigTest, SyntaxErrorsHaveAPosition) {
  EXPECT_THAT(ErrorOf("groups:\n  - name: [unclosed\n"),
              HasSubstr("aside.yaml:"));
}

TEST(ConfigTest, ConfigReloadSettings) {
  ASSERT_OK_AND_ASSIGN(ServerConfig defaults, Parse(""));
  EXPECT_TRUE(defaults.reload_watch);
  EXPECT_EQ(defaults.reload_interval, absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(ServerConfig c,
                       Parse("config_reload: {watch: false, interval: 250ms}"));
  EXPECT_FALSE(c.reload_watch);
  EXPECT_EQ(c.reload_interval, absl::Milliseconds(250));
  EXPECT_THAT(ErrorOf("config_reload:\n  interval: 10ms\n"),
              HasSubstr("aside.yaml:2:13: config_reload.interval: out of "
                        "range 100ms..1h"));
  EXPECT_THAT(ErrorOf("config_reload: {poll: true}"),
              HasSubstr("config_reload"));
}

TEST(ConfigTest, PublicationWindow) {
  ASSERT_OK_AND_ASSIGN(ServerConfig defaults, Parse(""));
  EXPECT_EQ(defaults.publish_window, absl::Milliseconds(5));
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse("publication: {window: 20ms}"));
  EXPECT_EQ(c.publish_window, absl::Milliseconds(20));
  ASSERT_OK_AND_ASSIGN(ServerConfig off, Parse("publication: {window: 0s}"));
  EXPECT_EQ(off.publish_window, absl::ZeroDuration());
  EXPECT_THAT(ErrorOf("publication:\n  window: 51ms\n"),
              HasSubstr("aside.yaml:2:11: publication.window: out of range "
                        "0..50ms"));
  EXPECT_THAT(ErrorOf("publication: {windw: 1ms}"), HasSubstr("publication"));
  ASSERT_OK_AND_ASSIGN(ServerConfig b, Parse(""));
  EXPECT_THAT(RestartOnlyChanges(b, c),
              ::testing::ElementsAre("publication.window"));
}

TEST(ConfigTest, GroupLinesPointAtEachGroup) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, Parse(R"(log_level: info
groups:
  - name: a
    backends: [127.0.0.1:1]
  - name: b
    backends: [127.0.0.1:2]
)"));
  EXPECT_THAT(c.group_lines, ::testing::ElementsAre(3, 5));
}

TEST(ConfigTest, RestartOnlyChangesNameTheKeysButNotLiveOnes) {
  ASSERT_OK_AND_ASSIGN(ServerConfig a, Parse(""));
  ASSERT_OK_AND_ASSIGN(
      ServerConfig b,
      Parse("log_level: debug\nlog_format: json\nshutdown_grace: 3s\n"
            "config_reload: {interval: 5s}\n"
            "groups:\n  - name: g\n    backends: [127.0.0.1:1]\n"));
  EXPECT_THAT(RestartOnlyChanges(a, b), ::testing::IsEmpty());
  ASSERT_OK_AND_ASSIGN(ServerConfig c,
                       Parse("listen: 127.0.0.1:1\nlimits: {max_groups: 5}\n"
                             "health: {merge_window: 1s}\n"));
  EXPECT_THAT(RestartOnlyChanges(a, c),
              ::testing::ElementsAre("listen", "limits.max_groups",
                                     "health.merge_window"));
  // Both halves of the fleet block: membership and the load view.
  ASSERT_OK_AND_ASSIGN(ServerConfig d, Parse("fleet: {member_ttl: 9s}\n"));
  EXPECT_THAT(RestartOnlyChanges(a, d), ::testing::ElementsAre("fleet"));
  ASSERT_OK_AND_ASSIGN(ServerConfig e,
                       Parse("fleet: {load_share_interval: 2s}\n"));
  EXPECT_THAT(RestartOnlyChanges(a, e), ::testing::ElementsAre("fleet"));
  ASSERT_OK_AND_ASSIGN(
      ServerConfig f,
      Parse("store: {type: etcd, etcd: {endpoints: [127.0.0.1:2379]}}\n"));
  EXPECT_THAT(RestartOnlyChanges(a, f), ::testing::ElementsAre("store"));
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(*ParseDurationText("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDurationText("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationText("0"), absl::ZeroDuration());
  EXPECT_FALSE(ParseDurationText("-5s").ok());
  EXPECT_FALSE(ParseDurationText("5").ok());
  EXPECT_FALSE(ParseDurationText("fast").ok());
  EXPECT_FALSE(ParseDurationText("99999999999999999999h").ok());
}

TEST(ConfigTest, LoadsTheShippedExampleConfig) {
  ASSERT_OK_AND_ASSIGN(
      ServerConfig c,
      LoadConfigFile(aside::testing::SourceDir() + "/examples/aside.yaml"));
  EXPECT_GE(c.groups.size(), 2u);
}

TEST(ConfigTest, MissingFileIsNamed) {
  EXPECT_THAT(LoadConfigFile("/nonexistent/aside.yaml"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/aside.yaml")));
}

TEST(ConfigTest, ASecondDocumentIsAnError) {
  EXPECT_THAT(ErrorOf("listen: 127.0.0.1:0\n---\ngroups: []\n"),
              HasSubstr("aside.yaml:2:1: a second YAML document"));
  // Even an empty one: whatever follows `---` would be silently ignored.
  EXPECT_THAT(ErrorOf("metrics: \"\"\n---\n"), HasSubstr("aside.yaml:2:"));
  // A leading document marker is one document.
  EXPECT_TRUE(Parse("---\nmetrics: \"\"\n").ok());
}

TEST(ConfigTest, DeepNestingIsRefusedWithoutRecursingIntoIt) {
  // Far past any stack a recursive reader would survive.
  const std::string flow = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorOf("groups: " + flow + "\n"),
              HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(ErrorOf("x: {a: " + std::string(70, '{') + "}"),
              HasSubstr("aside.yaml:1:"));
}

TEST(ConfigTest, TooManyNodesAreRefusedBeforeAnyIsBuilt) {
  // Under the byte cap (about 1.6 MB) but one node past the node cap.
  std::string many = "groups:\n";
  for (size_t i = 0; i <= yaml::kMaxYamlNodes; ++i) {
    many += "- x\n";
  }
  const std::string error = ErrorOf(many);
  EXPECT_THAT(error, HasSubstr("more than 200000 YAML nodes"));
  // Named where the cap was passed: the line of node 200001 (the mapping
  // and the key "groups" are nodes 1 and 2, the sequence node 3).
  EXPECT_THAT(error, HasSubstr("aside.yaml:199999:"));
  // At the cap a document is taken.
  std::string enough = "x:\n";
  for (size_t i = 0; i + 3 < yaml::kMaxYamlNodes; ++i) {
    enough += "- x\n";
  }
  EXPECT_THAT(ErrorOf(enough), ::testing::Not(HasSubstr("YAML nodes")));
}

TEST(ConfigTest, AThousandErrorsAreReportedAsAHundredAndACount) {
  std::string bad = "groups:\n";
  for (int i = 0; i < 1000; ++i) {
    bad += "- x\n";
  }
  const std::string error = ErrorOf(bad);
  EXPECT_THAT(error,
              HasSubstr("aside.yaml:2:3: groups[0]: expected a mapping"));
  EXPECT_THAT(error,
              HasSubstr("aside.yaml:101:3: groups[99]: expected a mapping"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("groups[100]")));
  EXPECT_THAT(error,
              HasSubstr("aside.yaml: ... and 900 more errors (1000 in all)"));
}

TEST(ConfigTest, OversizedTextAndFilesAreRefused) {
  const std::string big(yaml::kMaxYamlBytes + 1, '#');
  EXPECT_THAT(ErrorOf(big), HasSubstr("more than the 16777216"));
  aside::testing::TempDir dir;
  const std::string path = dir.WriteFile("big.yaml", big);
  EXPECT_THAT(LoadConfigFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(path + ": 16777217 bytes, more than")));
}

TEST(ConfigTest, NamesAndAliasesAreOneNamespace) {
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: web
    backends: [10.0.0.1:80]
  - name: api
    aliases: [api.example, web]
    backends: [10.0.0.2:80]
)"),
              HasSubstr("aside.yaml:5:28: groups[1].aliases[1]: alias 'web' is "
                        "already the name of group 'web'"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: a
    aliases: [shop.example]
  - name: b
    aliases: [shop.example]
)"),
              HasSubstr("aside.yaml:5:15: groups[1].aliases[0]: alias "
                        "'shop.example' is already an alias of group 'a'"));
  // The alias first, the name it takes later: the later group is named.
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: a
    aliases: [pay.example]
  - name: pay
)"),
              HasSubstr("aside.yaml:4:11: groups[1].name: name 'pay' is the "
                        "first label of alias 'pay.example' of group 'a'"));
  // Names compare as DNS names do: case and a trailing dot are ignored.
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: payments
  - name: b
    aliases: [PAYMENTS]
)"),
              HasSubstr("aside.yaml:4:15: groups[1].aliases[0]: alias "
                        "'PAYMENTS' is already the name of group 'payments'"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: payments
  - name: b
    aliases: [Payments.example.internal]
)"),
              HasSubstr("alias 'Payments.example.internal' would take the "
                        "clients of group 'payments'"));
  EXPECT_THAT(ErrorOf(R"(groups:
  - name: a
    aliases: [shop.example]
  - name: b
    aliases: [Shop.Example.]
)"),
              HasSubstr("alias 'Shop.Example.' is already an alias of group "
                        "'a'"));
  EXPECT_TRUE(Parse(R"(groups:
  - name: a
    aliases: [a.example, a]
  - name: b
    aliases: [b.example]
)")
                  .ok());
}

TEST(ConfigTest, AKetamaRingPastThePointCapIsAnError) {
  std::string text =
      "groups:\n  - name: k\n    policy: {name: ketama, points_per_weight: "
      "1000}\n    backends:\n";
  for (int i = 0; i < 20; ++i) {
    text += absl::StrCat("      - {address: 10.0.0.", i + 1,
                         ":80, weight: 10000}\n");
  }
  EXPECT_THAT(ErrorOf(text),
              HasSubstr("aside.yaml:3:47: groups[0].policy.ketama."
                        "points_per_weight: weights summing to 200000 × 1000 "
                        "make 200000000 ring points, more than 16777216"));
}

}  // namespace
}  // namespace aside::server

namespace aside::server {
namespace {

TEST(ConfigTest, ParsesAdminTlsDiscoveryAndGrpclb) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseConfig(R"(
health_listen: 127.0.0.1:0
admin:
  token_file: /etc/aside/tokens
  allowed_identities:
    - {identity: "spiffe://cluster.local/ns/ops/sa/deployer", role: admin}
tls:
  cert_file: /tls/tls.crt
  key_file: /tls/tls.key
  client_ca_file: /tls/ca.crt
  require_client_cert: true
session_key_file: /keys/session
discovery: {dns_servers: ["127.0.0.1:5353", "[::1]:53"]}
grpclb: {client_stats_report_interval: 5s, max_servers: 200}
limits: {max_state_bytes: 1048576}
)",
                                                   "aside.yaml"));
  EXPECT_EQ(c.health_listen, "127.0.0.1:0");
  EXPECT_EQ(c.admin_token_file, "/etc/aside/tokens");
  ASSERT_EQ(c.admin_identities.size(), 1u);
  EXPECT_EQ(c.admin_identities[0].role, "admin");
  EXPECT_EQ(c.tls_cert_file, "/tls/tls.crt");
  EXPECT_TRUE(c.tls_require_client_cert);
  EXPECT_EQ(c.session_key_file, "/keys/session");
  EXPECT_EQ(c.dns_servers.size(), 2u);
  EXPECT_EQ(c.grpclb_client_stats_report_interval, absl::Seconds(5));
  EXPECT_EQ(c.grpclb_max_servers, 200u);
  EXPECT_EQ(c.max_state_bytes, 1048576u);
}

TEST(ConfigTest, RejectsInconsistentTlsAndBadRoles) {
  auto err = [](const char* text) {
    auto c = ParseConfig(text, "aside.yaml");
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(err("tls: {cert_file: /a}\n"),
              ::testing::HasSubstr("cert_file and key_file go together"));
  EXPECT_THAT(
      err("tls: {cert_file: /a, key_file: /b, require_client_cert: true}\n"),
      ::testing::HasSubstr("needs client_ca_file"));
  EXPECT_THAT(err("admin: {allowed_identities: [{identity: x, role: root}]}\n"),
              ::testing::HasSubstr("unknown role 'root'"));
  EXPECT_THAT(err("discovery: {dns_servers: [ns.example:53]}\n"),
              ::testing::HasSubstr("must be an IP address"));
  EXPECT_THAT(err("grpclb: {client_stats_report_interval: 10ms}\n"),
              ::testing::HasSubstr("out of range 1s..1h"));
}

}  // namespace
}  // namespace aside::server

namespace aside::server {
namespace {

TEST(StoreConfigTest, SqliteIsTheDefault) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseConfig("", "aside.yaml"));
  EXPECT_EQ(c.store.type, "sqlite");
  ASSERT_OK_AND_ASSIGN(c, ParseConfig("store: {type: sqlite}\n", "aside.yaml"));
  EXPECT_EQ(c.store.type, "sqlite");
}

TEST(StoreConfigTest, ParsesEveryEtcdSetting) {
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseConfig(R"(store:
  type: etcd
  etcd:
    endpoints: [127.0.0.1:2379, "[::1]:2380", etcd-0.etcd:2379]
    prefix: /fleet/
    ca_file: /tls/ca.crt
    cert_file: /tls/client.crt
    key_file: /tls/client.key
    credentials_file: /secrets/etcd
    dial_timeout: 500ms
    request_timeout: 3s
    keepalive_time: 2s
    keepalive_timeout: 1s
    endpoint_order: listed
)",
                                                   "aside.yaml"));
  EXPECT_EQ(c.store.type, "etcd");
  EXPECT_THAT(c.store.endpoints,
              ::testing::ElementsAre("127.0.0.1:2379", "[::1]:2380",
                                     "etcd-0.etcd:2379"));
  EXPECT_EQ(c.store.prefix, "/fleet/");
  EXPECT_EQ(c.store.ca_file, "/tls/ca.crt");
  EXPECT_EQ(c.store.cert_file, "/tls/client.crt");
  EXPECT_EQ(c.store.key_file, "/tls/client.key");
  EXPECT_EQ(c.store.credentials_file, "/secrets/etcd");
  EXPECT_EQ(c.store.dial_timeout, absl::Milliseconds(500));
  EXPECT_EQ(c.store.request_timeout, absl::Seconds(3));
  EXPECT_EQ(c.store.keepalive_time, absl::Seconds(2));
  EXPECT_EQ(c.store.keepalive_timeout, absl::Seconds(1));
  EXPECT_EQ(c.store.endpoint_order, "listed");
}

TEST(StoreConfigTest, EtcdDefaults) {
  ASSERT_OK_AND_ASSIGN(
      ServerConfig c,
      ParseConfig("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n",
                  "aside.yaml"));
  EXPECT_EQ(c.store.prefix, "/aside/");
  EXPECT_EQ(c.store.dial_timeout, absl::Seconds(2));
  EXPECT_EQ(c.store.request_timeout, absl::Seconds(5));
  EXPECT_EQ(c.store.keepalive_time, absl::Seconds(10));
  EXPECT_EQ(c.store.keepalive_timeout, absl::Seconds(5));
  EXPECT_EQ(c.store.endpoint_order, "spread");
}

TEST(StoreConfigTest, ErrorsNameFileLineAndKey) {
  auto error = [](absl::string_view text) {
    absl::StatusOr<ServerConfig> c = ParseConfig(text, "aside.yaml");
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(error("store:\n  type: zookeeper\n"),
              HasSubstr("aside.yaml:2:9: store.type: unknown store "
                        "'zookeeper' (allowed: sqlite, etcd)"));
  EXPECT_THAT(error("store:\n  type: etcd\n"),
              HasSubstr("aside.yaml:2:3: store: type etcd needs "
                        "store.etcd.endpoints"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: []\n"),
              HasSubstr("aside.yaml:4:16: store.etcd.endpoints"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [nope]\n"),
              HasSubstr("aside.yaml:4:17: store.etcd.endpoints[0]"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    dial_timeout: 1h\n"),
              HasSubstr("aside.yaml:5:19: store.etcd.dial_timeout: out of "
                        "range 10ms..5m"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    endpoint_order: random\n"),
              HasSubstr("aside.yaml:5:21: store.etcd.endpoint_order: unknown "
                        "order 'random' (allowed: spread, listed)"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    keepalive_time: 0s\n"),
              HasSubstr("store.etcd.keepalive_time: out of range 10ms..5m"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    prefix: aside\n"),
              HasSubstr("aside.yaml:5:13: store.etcd.prefix: must be "
                        "non-empty and end with '/'"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    cert_file: c\n"),
              HasSubstr("store.etcd: cert_file and key_file go together"));
  EXPECT_THAT(error("store:\n  type: etcd\n  etcd:\n    endpoints: [a:1]\n"
                    "    tls: true\n"),
              HasSubstr("aside.yaml:5:5: store.etcd.tls"));
  EXPECT_THAT(error("store:\n  etcd: {endpoints: [a:1]}\n"),
              HasSubstr("store.etcd: needs store.type: etcd"));
}

TEST(FleetConfigTest, ReadsMembershipSettings) {
  ASSERT_OK_AND_ASSIGN(
      ServerConfig c,
      ParseConfig("fleet:\n  member_ttl: 3s\n  replica_id: aside-0\n"
                  "  advertise_address: 10.0.0.7:50051\n",
                  "aside.yaml"));
  EXPECT_EQ(c.fleet.member_ttl, absl::Seconds(3));
  EXPECT_EQ(c.fleet.replica_id, "aside-0");
  EXPECT_EQ(c.fleet.advertise_address, "10.0.0.7:50051");
  ASSERT_OK_AND_ASSIGN(ServerConfig d, ParseConfig("{}", "aside.yaml"));
  EXPECT_EQ(d.fleet.member_ttl, absl::Seconds(5));
  EXPECT_EQ(d.fleet.replica_id, "");
}

TEST(FleetConfigTest, ErrorsNameFileLineAndKey) {
  auto error = [](absl::string_view text) {
    absl::StatusOr<ServerConfig> c = ParseConfig(text, "aside.yaml");
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  EXPECT_THAT(error("fleet:\n  member_ttl: 500ms\n"),
              HasSubstr("aside.yaml:2:15: fleet.member_ttl: out of range "
                        "1s..5m in whole seconds"));
  EXPECT_THAT(error("fleet:\n  replica_id: \"a b\"\n"),
              HasSubstr("aside.yaml:2:15: fleet.replica_id"));
  EXPECT_THAT(error("fleet:\n  advertise_address: nope\n"),
              HasSubstr("aside.yaml:2:22: fleet.advertise_address"));
  EXPECT_THAT(error("fleet:\n  ttl: 5s\n"), HasSubstr("fleet.ttl"));
}

TEST(StoreConfigTest, StoreFlag) {
  StoreConfig store;
  store.prefix = "/kept/";
  ASSERT_OK(ApplyStoreFlag("etcd:127.0.0.1:2379,127.0.0.1:2380", &store));
  EXPECT_EQ(store.type, "etcd");
  EXPECT_THAT(store.endpoints,
              ::testing::ElementsAre("127.0.0.1:2379", "127.0.0.1:2380"));
  EXPECT_EQ(store.prefix, "/kept/");
  ASSERT_OK(ApplyStoreFlag("sqlite", &store));
  EXPECT_EQ(store.type, "sqlite");
  EXPECT_THAT(
      ApplyStoreFlag("etcd:", &store),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--store")));
  EXPECT_THAT(ApplyStoreFlag("etcd:nohost", &store),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--store: nohost")));
  EXPECT_THAT(
      ApplyStoreFlag("consul", &store),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sqlite")));
}

}  // namespace
}  // namespace aside::server
