// asidectl against the real server binary: every command's output and exit
// code, --json, the token from the flag or ASIDE_TOKEN, a bad token, and
// usage errors.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/client.h"
#include "tests/client/client_helpers.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::CommandResult;
using ::aside::testing::kClientTestConfig;
using ::aside::testing::kClientTestToken;
using ::aside::testing::RunCommand;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A backend's credential in the server's token file: it may drain and
// undrain only the addresses at the caller's IP (127.0.0.1 here).
constexpr char kSelfDrainToken[] = "self-drain-token-0123456789";

class AsidectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("ASIDE_TOKEN");
    unsetenv("POD_IP");
    auto server = aside::testing::StartServer(
        dir_.path() + "/state",
        {"--config", dir_.WriteFile("aside.yaml", kClientTestConfig),
         "--admin-token-file",
         dir_.WriteSecret("tokens",
                          absl::StrCat(kClientTestToken, " admin\n",
                                       kSelfDrainToken, " self-drain\n"))});
    ASSERT_OK(server);
    server_ = *std::move(server);
  }

  // Runs asidectl with --server and the token, plus `args`.
  CommandResult Ctl(std::vector<std::string> args, bool token = true) {
    std::vector<std::string> argv = {aside::testing::BinDir() + "/asidectl",
                                     "--server", server_.target()};
    if (token) {
      argv.push_back("--token");
      argv.push_back(kClientTestToken);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, absl::Seconds(30));
  }

  TempDir dir_;
  RunningServer server_;
};

TEST_F(AsidectlTest, ReadCommandsPrintTablesOrJson) {
  CommandResult r = Ctl({"groups"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("NAME"), HasSubstr("GENERATION"), HasSubstr("rr"),
                    HasSubstr("wrr"), HasSubstr("weighted_round_robin"),
                    HasSubstr("file")));
  r = Ctl({"groups", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("\"groups\""), HasSubstr("\"name\": \"rr\""),
                    HasSubstr("GROUP_SOURCE_FILE")));

  r = Ctl({"group", "wrr"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(
      r.output,
      AllOf(HasSubstr("group:"), HasSubstr("wrr"), HasSubstr("ADDRESS"),
            HasSubstr("127.0.0.1:9101"), HasSubstr("500"), HasSubstr("local/a"),
            HasSubstr("version=v2"), HasSubstr("ready:       3 of 3")));
  r = Ctl({"--json", "group", "wrr"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("\"state\""),
                              HasSubstr("\"effectiveWeight\": 500")));

  r = Ctl({"pick", "rr"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("ADDRESS"), HasSubstr("127.0.0.1:900"),
                              HasSubstr("generation ")));
  r = Ctl({"pick", "rr", "some-key", "--count", "3", "--json"},
          /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("\"backends\""), HasSubstr("127.0.0.1:9001"),
                    HasSubstr("127.0.0.1:9002"), HasSubstr("127.0.0.1:9003")));

  r = Ctl({"watch", "rr", "--updates", "1"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("rr generation="),
                              HasSubstr("full policy=round_robin"),
                              HasSubstr("127.0.0.1:9002 weight=100 ready")));
  r = Ctl({"watch", "rr", "wrr", "--updates", "2", "--json"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("\"group\":\"rr\""),
                    HasSubstr("\"group\":\"wrr\""), HasSubstr("\"full\"")));

  // ListTargets: either a table, or a clear word that the server does not
  // implement it yet.
  r = Ctl({"targets"});
  if (r.exit_code == 0) {
    EXPECT_THAT(r.output, HasSubstr("ADDRESS"));
  } else {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.output, AllOf(HasSubstr("UNIMPLEMENTED"),
                                HasSubstr("does not implement targets")));
  }
}

TEST_F(AsidectlTest, MutationsFromFlagsAndFiles) {
  CommandResult r =
      Ctl({"create-group", "web", "--backend", "127.0.0.1:9401=200",
           "--backend", "127.0.0.1:9402", "--policy", "weighted_round_robin",
           "--health-check", "none"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("created group web"));
  r = Ctl({"group", "web"});
  EXPECT_THAT(r.output, AllOf(HasSubstr("weighted_round_robin"),
                              HasSubstr("127.0.0.1:9401"), HasSubstr("200"),
                              HasSubstr("admin")));

  r = Ctl({"add-backend", "web", "127.0.0.1:9403=50"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("added 1 backend(s) (group web, generation"));
  r = Ctl({"drain", "web", "127.0.0.1:9401"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("drained 1 backend(s)"));
  r = Ctl({"group", "web"});
  EXPECT_THAT(r.output, HasSubstr("ready:       2 of 3"));
  r = Ctl({"undrain", "web", "127.0.0.1:9401", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"name\": \"web\""));
  r = Ctl({"remove-backend", "web", "127.0.0.1:9403"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("removed 1 backend(s)"));
  r = Ctl({"remove-backend", "web", "127.0.0.1:9403"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("NOT_FOUND"));
  r = Ctl({"delete-group", "web"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("deleted group web"));

  // YAML in the config file's shape, with its shorthands.
  const std::string yaml = dir_.WriteFile("groups.yaml", R"(groups:
  - name: from-yaml
    policy: round_robin
    health_check: {kind: none}
    backends:
      - 127.0.0.1:9501
      - address: 127.0.0.1:9502
        weight: 300
        metadata: {tier: gold}
)");
  r = Ctl({"create-group", yaml});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("created group from-yaml"));
  r = Ctl({"group", "from-yaml"});
  EXPECT_THAT(r.output, AllOf(HasSubstr("127.0.0.1:9502"), HasSubstr("300"),
                              HasSubstr("tier=gold")));
  // Protobuf JSON, as grpcurl takes it.
  const std::string json = dir_.WriteFile(
      "group.json",
      R"({"group": {"name": "from-json", "policy": {"weightedRoundRobin": {}},
          "healthCheck": {"kind": "NONE"},
          "backends": [{"address": "127.0.0.1:9601", "weight": 7}]}})");
  r = Ctl({"create-group", json});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = Ctl({"group", "from-json", "--json"});
  EXPECT_THAT(r.output, AllOf(HasSubstr("weightedRoundRobin"),
                              HasSubstr("127.0.0.1:9601")));
  // A policy this server build lacks is the server's answer, not a usage
  // error.
  r = Ctl({"create-group", "hashed", "--backend", "127.0.0.1:9801", "--policy",
           "maglev"});
  EXPECT_THAT(r.exit_code, ::testing::AnyOf(0, 1)) << r.output;

  // Server-side validation errors come back as RPC errors.
  r = Ctl({"create-group", "bad", "--backend", "127.0.0.1:9701=20000"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("weight")));
}

// What a backend's preStop hook runs: its own address from $POD_IP (or
// --self-ip) and the port, with a token that may drain nothing else.
TEST_F(AsidectlTest, APreStopHookDrainsItsOwnBackendWithASelfDrainToken) {
  CommandResult r =
      Ctl({"create-group", "pods", "--backend", "127.0.0.1:9411", "--backend",
           "127.0.0.2:9411", "--health-check", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string token_file =
      dir_.WriteSecret("self-drain", absl::StrCat(kSelfDrainToken, "\n"));
  auto hook = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--token-file", token_file});
    return Ctl(args, /*token=*/false);
  };

  setenv("POD_IP", "127.0.0.1", 1);
  r = hook({"drain", "pods", "--self", "9411"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("drained 1 backend(s) 127.0.0.1:9411 "
                                  "(group pods, generation"));
  r = Ctl({"group", "pods"});
  EXPECT_THAT(r.output, HasSubstr("ready:       1 of 2"));

  // Another pod's address, from the environment or the flag.
  setenv("POD_IP", "127.0.0.2", 1);
  r = hook({"drain", "pods", "--self", "9411"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("PERMISSION_DENIED"),
                    HasSubstr("drains only the caller's own address "
                              "127.0.0.1; 127.0.0.2:9411 is another")));
  unsetenv("POD_IP");
  r = hook({"drain", "pods", "--self", "9411", "--self-ip", "127.0.0.2"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Named addresses are checked the same way.
  r = hook({"drain", "pods", "127.0.0.2:9411"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("PERMISSION_DENIED"));
  // Nothing else, not even reading the group.
  r = hook({"group", "pods"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("PERMISSION_DENIED"));
  r = Ctl({"group", "pods"});
  EXPECT_THAT(r.output, HasSubstr("ready:       1 of 2"));

  r = hook({"undrain", "pods", "--self", "9411", "--self-ip", "127.0.0.1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("undrained 1 backend(s) 127.0.0.1:9411"));
  r = Ctl({"group", "pods"});
  EXPECT_THAT(r.output, HasSubstr("ready:       2 of 2"));

  // Usage errors: no IP to name, a bad port, both forms at once.
  r = hook({"drain", "pods", "--self", "9411"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("this host's IP is unknown"));
  r = hook({"drain", "pods", "--self", "70000", "--self-ip", "127.0.0.1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--self 70000"));
  r = hook({"drain", "pods", "--self", "9411", "--self-ip", "pod.local"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not an IP address"));
  r = hook({"drain", "pods", "127.0.0.1:9411", "--self", "9411", "--self-ip",
            "127.0.0.1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not both"));
}

// drain --wait: exits 0 once every client of the group confirmed the drain
// (a stub here), with a self-drain token too; at the timeout, 1 naming the
// client that has not.
TEST_F(AsidectlTest, DrainWaitExitsZeroOnceEveryClientConfirmed) {
  CommandResult r =
      Ctl({"create-group", "waited", "--backend", "127.0.0.1:9421", "--backend",
           "127.0.0.1:9422", "--backend", "127.0.0.1:9423", "--health-check",
           "none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto client = Client::Create({.targets = {server_.target()}});
  ASSERT_OK(client);
  ClientGroup* group = (*client)->Group("waited");
  ASSERT_TRUE(group->WaitForGeneration(1, absl::Seconds(20)));

  r = Ctl({"drain", "--wait", "--timeout", "20s", "waited", "127.0.0.1:9421"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("drained 1 backend(s) 127.0.0.1:9421"),
                              HasSubstr("drained: every client of group waited "
                                        "confirmed generation")));

  const std::string token_file =
      dir_.WriteSecret("self-drain", absl::StrCat(kSelfDrainToken, "\n"));
  r = Ctl({"--token-file", token_file, "drain", "--wait", "waited", "--self",
           "9422", "--self-ip", "127.0.0.1"},
          /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("drained: every client of group waited"));

  // A subscriber that never answers holds the wait to its timeout.
  auto channel =
      grpc::CreateChannel(server_.target(), grpc::InsecureChannelCredentials());
  auto lb = v1::LoadBalancer::NewStub(channel);
  grpc::ClientContext context;
  auto stream = lb->WatchConfirmed(&context);
  v1::WatchMessage first;
  first.mutable_request()->add_groups("waited");
  first.mutable_request()->set_subscriber("stuck-stub");
  ASSERT_TRUE(stream->Write(first));
  v1::GroupUpdate update;
  ASSERT_TRUE(stream->Read(&update));  // its full table: it is subscribed
  r = Ctl({"drain", "--wait", "--timeout", "1s", "waited", "127.0.0.1:9423"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("not drained after 1s"),
                              HasSubstr("watch stuck-stub")));
  context.TryCancel();
}

TEST_F(AsidectlTest, ApplyChangesFromAFileAnswersEachChange) {
  // YAML, with the fields as the proto spells them.
  const std::string yaml = dir_.WriteFile("changes.yaml", R"(changes:
  - create_group:
      group:
        name: batch
        health_check: {kind: NONE}
        backends: [{address: "127.0.0.1:9901"}, {address: "127.0.0.1:9902"}]
  - drain_backends: {group: batch, addresses: ["127.0.0.1:9902"], drained: true}
  - add_backends: {group: missing, backends: [{address: "127.0.0.1:9903"}]}
)");
  CommandResult r = Ctl({"apply-changes", yaml});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // one change failed
  EXPECT_THAT(r.output, AllOf(HasSubstr("0 create_group batch: ok (generation"),
                              HasSubstr("1 drain_backends batch: ok"),
                              HasSubstr("2 add_backends missing: NOT_FOUND"),
                              HasSubstr("applied 2 of 3 changes")));
  r = Ctl({"group", "batch"});
  EXPECT_THAT(r.output, HasSubstr("ready:       1 of 2"));
  // Protobuf JSON, all of it succeeding, with --json.
  const std::string json =
      dir_.WriteFile("changes.json",
                     R"({"changes": [{"drainBackends": {"group": "batch",
          "addresses": ["127.0.0.1:9902"], "drained": false}},
          {"deleteGroup": {"name": "batch"}}]})");
  r = Ctl({"apply-changes", json, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("\"results\""),
                              HasSubstr("\"group\": \"batch\"")));
  r = Ctl({"group", "batch"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // A file that is no list of changes is a usage error naming the file.
  const std::string bad =
      dir_.WriteFile("bad.yaml", "changes:\n  - frobnicate: {group: x}\n");
  r = Ctl({"apply-changes", bad});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("bad.yaml"), HasSubstr("frobnicate")));
}

TEST_F(AsidectlTest, TokensFromTheEnvironmentAndBadTokens) {
  CommandResult r = Ctl({"groups"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("UNAUTHENTICATED"),
                              HasSubstr("--token or ASIDE_TOKEN")));
  r = Ctl({"groups", "--token", "not-the-right-token-at-all"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("asidectl: groups: UNAUTHENTICATED"));
  setenv("ASIDE_TOKEN", kClientTestToken, 1);
  r = Ctl({"groups"}, /*token=*/false);
  unsetenv("ASIDE_TOKEN");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrr"));
}

TEST_F(AsidectlTest, EveryMessageIsALineOfItsOwn) {
  CommandResult r = Ctl({"groups"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(r.output.back(), '\n');
  std::vector<std::string> lines = absl::StrSplit(r.output, '\n');
  lines.pop_back();  // after the final newline
  ASSERT_EQ(lines.size(), 2u) << r.output;
  EXPECT_THAT(lines[0], ::testing::StartsWith(
                            "asidectl: groups: UNAUTHENTICATED: admin:"));
  EXPECT_THAT(lines[1], ::testing::StartsWith(
                            "asidectl: pass an Admin token with --token"));
  // Usage errors, bad flags, unreadable files: each message ends its line.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"group"},
           {"--interval", "1ms", "groups"},
           {"--token-file", dir_.path() + "/none", "groups"},
           {"pick", "rr", "--watch"}}) {
    r = Ctl(args, /*token=*/false);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.back(), '\n') << r.output;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("asidectl: asidectl")));
    EXPECT_THAT(r.output, ::testing::StartsWith("asidectl: ")) << r.output;
  }
}

TEST_F(AsidectlTest, TokenFromATokenFile) {
  const std::string file = dir_.WriteFile(
      "demo-token",
      absl::StrCat("# made by make run\n\n", kClientTestToken, " admin\n"));
  CommandResult r = Ctl({"groups", "--token-file", file}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("wrr"));
  setenv("ASIDE_TOKEN_FILE", file.c_str(), 1);
  r = Ctl({"drain", "rr", "127.0.0.1:9001"}, /*token=*/false);
  unsetenv("ASIDE_TOKEN_FILE");
  // Authenticated: the refusal is about the config-file group, not the
  // token.
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("FAILED_PRECONDITION"));
  r = Ctl({"groups", "--token-file", dir_.WriteFile("empty", "# nothing\n")},
          /*token=*/false);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no token in it"));
}

TEST_F(AsidectlTest, MembersWithoutAFleetSaysSo) {
  // This server keeps its groups in SQLite: no membership, every replica
  // probes everything (the fleet case is in tests/fleet).
  CommandResult r = Ctl({"members"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no fleet"));
  r = Ctl({"members"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 1);
}

TEST_F(AsidectlTest, StatusShowsGroupsAndBackends) {
  CommandResult r = Ctl({"status"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("2 groups, 6/6 backends ready"));
  EXPECT_THAT(r.output, HasSubstr("weighted_round_robin"));
  for (const char* address :
       {"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003", "127.0.0.1:9101",
        "127.0.0.1:9102", "127.0.0.1:9103"}) {
    EXPECT_THAT(r.output, HasSubstr(address));
  }
  EXPECT_THAT(r.output, HasSubstr("LAST PROBE"));
  r = Ctl({"status", "wrr"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("1 groups, 3/3 backends ready"));
  EXPECT_THAT(r.output, Not(HasSubstr("127.0.0.1:9001")));
  r = Ctl({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("\"groups\""), HasSubstr("\"targets\"")));
  r = Ctl({"status"}, /*token=*/false);
  EXPECT_EQ(r.exit_code, 1);
}

TEST_F(AsidectlTest, WatchRedrawsAListAndStops) {
  CommandResult r =
      Ctl({"status", "--watch", "--interval", "100ms", "--updates", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t frames = 0;
  for (size_t at = r.output.find("Every 100ms: asidectl status");
       at != std::string::npos;
       at = r.output.find("Every 100ms: asidectl status", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 3u) << r.output;
  // Not a terminal: frames follow each other, no escape sequences.
  EXPECT_THAT(r.output, Not(HasSubstr("\x1b[")));
}

TEST_F(AsidectlTest, WatchEndsCleanlyOnCtrlC) {
  // Without a token every frame fails on stderr, which tells the test that
  // the loop is running (and that a failed frame is retried, not fatal).
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<aside::testing::Process> ctl,
      aside::testing::Process::Start({aside::testing::BinDir() + "/asidectl",
                                      "--server", server_.target(), "groups",
                                      "--watch", "--interval", "100ms"}));
  ASSERT_OK(ctl->WaitForLine("UNAUTHENTICATED", absl::Seconds(20)));
  ASSERT_OK(ctl->WaitForLine("UNAUTHENTICATED", absl::Seconds(20)));
  ctl->Signal(SIGINT);
  std::optional<int> status = ctl->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

TEST_F(AsidectlTest, PickTakesATextKey) {
  // The same key always lands on the same backend of a hash group (the
  // server and stub agreement itself is tested in server_policies_test).
  const std::string groups = dir_.WriteFile("hash.yaml", R"(groups:
  - name: hashed
    policy: hash
    health_check: {kind: none}
    backends: [127.0.0.1:9301, 127.0.0.1:9302, 127.0.0.1:9303]
)");
  ASSERT_EQ(Ctl({"create-group", groups}).exit_code, 0);
  CommandResult first = Ctl({"pick", "hashed", "user-42", "--json"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (int i = 0; i < 5; ++i) {
    CommandResult again = Ctl({"pick", "hashed", "user-42", "--json"});
    EXPECT_EQ(again.output.substr(0, again.output.find("generation")),
              first.output.substr(0, first.output.find("generation")));
  }
}

TEST_F(AsidectlTest, UsageErrorsExitWithTwo) {
  const std::string bin = aside::testing::BinDir() + "/asidectl";
  EXPECT_EQ(RunCommand({bin}).exit_code, 2);
  CommandResult r = RunCommand({bin, "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, AllOf(HasSubstr("unknown command 'frobnicate'"),
                              HasSubstr("usage:")));
  r = RunCommand({bin, "--bogus", "groups"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown flag '--bogus'"));
  r = Ctl({"group"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("missing group name"));
  r = Ctl({"create-group", dir_.path() + "/missing.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("missing.yaml"));
  r = RunCommand({bin, "--tls-ca", "/nonexistent/ca.pem", "groups"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/ca.pem"));
  EXPECT_EQ(RunCommand({bin, "--help"}).exit_code, 0);
  // An unreachable server is an RPC error.
  r = RunCommand({bin, "--server",
                  absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort()),
                  "--timeout", "2s", "pick", "rr"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("UNAVAILABLE"), Not(HasSubstr("usage:"))));
}

}  // namespace
}  // namespace aside
