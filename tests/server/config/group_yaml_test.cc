// The group shorthand converter (proto/yaml/group_yaml.h) as asidectl uses
// it, against the server's config loader: the same text means the same group.
#include "proto/yaml/group_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/config/config.h"
#include "server/schema/group_spec_proto.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

// Every key of the shorthand at least once.
constexpr char kGroups[] = R"(groups:
  - name: payments
    policy: {name: sticky, ttl: 30m, fallback: {name: p2c, load: peak_ewma, decay: 5s, default_rtt: 20ms}}
    panic_threshold: 30
    slow_start: 1m
    health_check:
      kind: http
      interval: 500ms
      timeout: 200ms
      jitter: 0.1
      rise: 1
      fall: 2
      require_first_probe: true
      port: 8081
      http: {path: /healthz, host: pay.internal, expected_statuses: ["200-299", 404], body_limit: 2048}
    outlier_detection: {consecutive_failures: 3, base_ejection_time: 10s, max_ejection_time: 100s, max_ejection_percent: 20}
    dns: {name: pay.svc.test, port: 8080, interval: 10s, weight: 50, locality: {region: eu, zone: eu-1a}}
    aliases: [pay, payments.lb.test]
    grpclb: {drop_in_panic_percent: 10, max_requests_per_second: 500}
    backends:
      - 10.0.0.1:8080
      - address: "[::1]:9090"
        weight: 0
        locality: {region: eu, zone: eu-1b, subzone: r1}
        metadata: {version: v2}
        drained: true
  - name: ring
    policy: {name: ketama, points_per_weight: 40}
    health_check: {kind: grpc, grpc: {service: svc, authority: ring.test}}
    backends: [10.0.1.1:80]
  - name: zones
    policy: {name: locality, weight_expiration_period: 60s, update_period: 2s, smoothing_time_constant: 10s, utilization_variance_threshold: 0.2, remote_probe_fraction: 0.05, child: {name: least_time, metric: first_byte, alpha: 0.5, default_latency: 5ms}}
  - name: table
    policy: {name: maglev, table_size: 101}
    health_check: {kind: none}
)";

TEST(GroupYamlTest, AsidectlAndTheConfigFileReadTheSameGroups) {
  ASSERT_OK_AND_ASSIGN(ServerConfig config, ParseConfig(kGroups, "aside.yaml"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Group> sent,
                       yaml::GroupsFromText(kGroups, "groups.yaml"));
  ASSERT_EQ(sent.size(), config.groups.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE(sent[i].name());
    // What the server makes of asidectl's CreateGroup request.
    ASSERT_OK_AND_ASSIGN(GroupSpec created,
                         GroupSpecFromProto("group", sent[i]));
    GroupSpec from_file = config.groups[i];
    from_file.source = created.source;
    from_file.file = created.file;
    EXPECT_TRUE(created == from_file);
    v1::Group a, b;
    GroupSpecToProto(created, &a);
    GroupSpecToProto(from_file, &b);
    EXPECT_EQ(a.DebugString(), b.DebugString());
    // A summary (ListGroups) carries every definition field but the
    // backends.
    v1::Group summary;
    GroupSpecToProto(created, &summary, /*with_backends=*/false);
    EXPECT_EQ(summary.backends_size(), 0);
    a.clear_backends();
    EXPECT_EQ(summary.DebugString(), a.DebugString());
  }
  // Spot checks that the shorthand meant what it says.
  const GroupSpec& g = config.groups[0];
  EXPECT_TRUE(g.outlier.enabled);
  EXPECT_EQ(g.health_check.http_expected_statuses,
            (std::vector<StatusRange>{{200, 299}, {404, 404}}));
  ASSERT_TRUE(g.dns.has_value());
  EXPECT_EQ(g.dns->locality.zone, "eu-1a");
  EXPECT_EQ(g.policy.child->p2c.load, P2cParams::Load::kPeakEwma);
  EXPECT_EQ(config.groups[2].policy.child->least_time.alpha, 0.5);
}

TEST(GroupYamlTest, GroupFileForms) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<v1::Group> one,
      yaml::GroupsFromText("group: {name: a, policy: random}", "g.yaml"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].policy().has_random());
  ASSERT_OK_AND_ASSIGN(
      std::vector<v1::Group> bare,
      yaml::GroupsFromText(R"({"name": "b", "backends": ["10.0.0.1:80"]})",
                           "g.json"));
  ASSERT_EQ(bare.size(), 1u);
  EXPECT_EQ(bare[0].backends(0).address(), "10.0.0.1:80");
  // Protobuf JSON, as grpcurl takes it.
  ASSERT_OK_AND_ASSIGN(
      std::vector<v1::Group> json,
      yaml::GroupsFromText(
          R"({"groups": [{"name": "c", "policy": {"weightedRoundRobin": {}},
              "healthCheck": {"kind": "NONE"}}]})",
          "g.json"));
  ASSERT_EQ(json.size(), 1u);
  EXPECT_TRUE(json[0].policy().has_weighted_round_robin());
  EXPECT_EQ(json[0].health_check().kind(), v1::HealthCheck::NONE);
}

TEST(GroupYamlTest, ShorthandErrorsNameFileLineAndKey) {
  auto error = [](absl::string_view text) {
    absl::StatusOr<std::vector<v1::Group>> g =
        yaml::GroupsFromText(text, "g.yaml");
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  EXPECT_THAT(error("groups:\n  - name: a\n    polcy: random\n"),
              HasSubstr("g.yaml:3:5: groups[0].polcy: unknown key"));
  EXPECT_THAT(error("name: a\nname: b\n"), HasSubstr("name: key given twice"));
  EXPECT_THAT(error("name: a\nbackends: [{address: 10.0.0.1:80, weight: x}]\n"),
              HasSubstr("g.yaml:2:43: backends[0].weight: expected a "
                        "non-negative integer, got 'x'"));
  EXPECT_THAT(error("name: a\nhealth_check: {kind: udp}\n"),
              HasSubstr("health_check.kind: unknown kind 'udp'"));
  EXPECT_THAT(error("name: a\nslow_start: 5\n"), HasSubstr("needs a unit"));
  // Ranges are not the converter's: the server reports them.
  EXPECT_EQ(error("name: a\nhealth_check: {jitter: 0.9}\n"), "");
}

TEST(GroupYamlTest, FieldMarksFallBackToTheClosestField) {
  yaml::YamlReader reader("g.yaml");
  yaml::FieldMarks marks;
  v1::Group g;
  ASSERT_TRUE(yaml::GroupFromYaml(
      reader, YAML::Load("name: a\nbackends:\n  - address: 10.0.0.1:80\n"), "",
      &g, &marks));
  EXPECT_EQ(marks.Find("backends[0].address").line, 2);
  EXPECT_EQ(marks.Find("backends[0].metadata['k']").line, 2);
  EXPECT_EQ(marks.Find("backends[0].address").column, 13);
  EXPECT_EQ(marks.Find("dns.port").line, 0);  // the group
}

}  // namespace
}  // namespace aside::server
