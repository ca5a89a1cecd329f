// End-to-end tests of the aside-server binary: real process, real gRPC,
// reflection resolved the way grpcurl does, health, /metrics, signals and
// the config checker.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/reflection_client.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Process;
using ::aside::testing::TempDir;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

constexpr char kConfig[] = R"(
groups:
  - name: demo
    policy: round_robin
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
  - name: weighted
    policy: weighted_round_robin
    health_check: {kind: none}
    backends:
      - {address: 127.0.0.1:9101, weight: 300}
      - {address: 127.0.0.1:9102, weight: 100}
  - name: down
    health_check: {kind: none}
    backends: [{address: 127.0.0.1:9201, drained: true}]
)";

using ::aside::testing::Context;
using ::aside::testing::RunningServer;

absl::StatusOr<RunningServer> StartServer(const TempDir& dir,
                                          std::vector<std::string> extra) {
  return aside::testing::StartServer(dir.path() + "/state", std::move(extra));
}

class ServerBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_.WriteFile("aside.yaml", kConfig);
    auto s = StartServer(dir_, {"--config", config_});
    ASSERT_OK(s);
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel(server_.target(),
                                   grpc::InsecureChannelCredentials());
  }

  TempDir dir_;
  std::string config_;
  RunningServer server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ServerBinaryTest, AnswersPicks) {
  auto stub = v1::LoadBalancer::NewStub(channel_);
  std::map<std::string, int> counts;
  for (int i = 0; i < 8; ++i) {
    v1::PickRequest request;
    request.set_group("weighted");
    v1::PickResponse response;
    grpc::Status s = stub->Pick(Context().get(), request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    counts[response.backends(0).address()]++;
  }
  EXPECT_EQ(counts["127.0.0.1:9101"], 6);
  EXPECT_EQ(counts["127.0.0.1:9102"], 2);

  v1::PickRequest request;
  request.set_group("down");
  v1::PickResponse response;
  grpc::Status s = stub->Pick(Context().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("'down'"));
}

TEST_F(ServerBinaryTest, EveryThreadItStartsIsNamedAndDocumented) {
  auto stub = v1::LoadBalancer::NewStub(channel_);
  v1::PickRequest request;
  request.set_group("demo");
  v1::PickResponse response;
  ASSERT_TRUE(stub->Pick(Context().get(), request, &response).ok());
  absl::StatusOr<std::set<std::string>> documented =
      aside::testing::DocumentedThreadNames();
  ASSERT_OK(documented);
  const std::map<std::string, int> threads =
      aside::testing::ThreadNames(server_.process->pid());
  ASSERT_FALSE(threads.empty());
  EXPECT_THAT(aside::testing::UndocumentedThreads(threads, *documented),
              ::testing::IsEmpty());
  // The threads of a server on SQLite with a config file and a metrics
  // port, each once (Watch has two queues), and none of the fleet's. The
  // periodic work is timers on the loop, not threads of its own.
  for (const char* name : {"aside-loop", "aside-publish", "aside-prober",
                           "aside-ads", "aside-gate", "aside-http",
                           "aside-reload", "aside-dns", "aside-orca"}) {
    auto it = threads.find(name);
    EXPECT_TRUE(it != threads.end() && it->second == 1) << name;
  }
  auto cq = threads.find("aside-watch-cq");
  EXPECT_TRUE(cq != threads.end() && cq->second == 2);
  EXPECT_GE(threads.count("aside-relay"), 1u);
  for (const char* name :
       {"aside-etcd-fol", "aside-members", "aside-lv-link", "aside-fleet-pub",
        "aside-rebuild", "aside-watch-jan", "aside-grpclb", "aside-history",
        "aside-loadview", "aside-lv-dog"}) {
    EXPECT_EQ(threads.count(name), 0u) << name;
  }
}

// Collects every message type reachable from `d` (fields, nested types).
void CollectMessages(const google::protobuf::Descriptor* d,
                     std::set<std::string>* out) {
  if (d->options().map_entry()) {
    // Synthetic map entries are not symbols; their value types are.
    for (int i = 0; i < d->field_count(); ++i) {
      if (const auto* m = d->field(i)->message_type()) {
        CollectMessages(m, out);
      }
    }
    return;
  }
  if (!out->insert(d->full_name()).second) {
    return;
  }
  for (int i = 0; i < d->field_count(); ++i) {
    if (const auto* m = d->field(i)->message_type()) {
      CollectMessages(m, out);
    }
  }
  for (int i = 0; i < d->nested_type_count(); ++i) {
    CollectMessages(d->nested_type(i), out);
  }
}

TEST_F(ServerBinaryTest, ReflectionResolvesEveryServiceAndMessage) {
  aside::testing::ReflectionClient reflection(channel_);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> services,
                       reflection.ListServices());
  EXPECT_THAT(services, Contains("aside.v1.LoadBalancer"));
  EXPECT_THAT(services, Contains("aside.v1.Admin"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));

  std::set<std::string> messages;
  for (const std::string& name : services) {
    ASSERT_OK_AND_ASSIGN(const google::protobuf::ServiceDescriptor* service,
                         reflection.DescribeService(name));
    ASSERT_GT(service->method_count(), 0) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      CollectMessages(service->method(i)->input_type(), &messages);
      CollectMessages(service->method(i)->output_type(), &messages);
    }
  }
  // describe MESSAGE works for each of them, by name, from a fresh client.
  aside::testing::ReflectionClient fresh(channel_);
  for (const std::string& name : messages) {
    EXPECT_OK(fresh.DescribeMessage(name)) << name;
  }
  EXPECT_THAT(messages, Contains("aside.v1.PickRequest"));
  EXPECT_THAT(messages, Contains("aside.v1.Table"));
  EXPECT_THAT(messages, Contains("google.protobuf.Duration"));
}

TEST_F(ServerBinaryTest, PickAndHealthWithJsonThroughReflection) {
  aside::testing::ReflectionClient reflection(channel_);
  ASSERT_OK_AND_ASSIGN(std::string pick,
                       reflection.CallJson("aside.v1.LoadBalancer", "Pick",
                                           R"({"group":"demo"})"));
  EXPECT_THAT(pick, HasSubstr("127.0.0.1:900"));
  EXPECT_THAT(pick, HasSubstr("\"generation\""));

  ASSERT_OK_AND_ASSIGN(
      std::string health,
      reflection.CallJson("grpc.health.v1.Health", "Check", "{}"));
  EXPECT_THAT(health, HasSubstr("SERVING"));

  EXPECT_THAT(reflection.CallJson("aside.v1.LoadBalancer", "Pick",
                                  R"({"group":"missing"})"),
              aside::testing::StatusIs(absl::StatusCode::kNotFound,
                                       HasSubstr("missing")));
  EXPECT_THAT(reflection.CallJson("aside.v1.LoadBalancer", "Pick",
                                  R"({"group":"demo","count":99})"),
              aside::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("count")));
}

TEST_F(ServerBinaryTest, HealthServiceKnowsServerServicesAndGroups) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  auto check = [&](const std::string& service,
                   grpc::health::v1::HealthCheckResponse* response) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    return stub->Check(Context().get(), request, response);
  };
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(check("", &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("aside.v1.LoadBalancer", &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("demo", &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("down", &response).ok());
  EXPECT_EQ(response.status(),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(check("no-such-thing", &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // A long name with CR/LF is echoed cut and escaped, never raw.
  std::string hostile(100000, 'a');
  hostile.replace(10, 2, "\r\n");
  const grpc::Status unknown = check(hostile, &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(unknown.error_message().size(), 256u) << unknown.error_message();
  EXPECT_EQ(unknown.error_message().find_first_of("\r\n"), std::string::npos)
      << unknown.error_message();
  EXPECT_THAT(unknown.error_message(), HasSubstr("(100000 bytes)"));

  // Watch sends the current status first.
  auto context = Context();
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("demo");
  auto reader = stub->Watch(context.get(), request);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  context->TryCancel();
}

// At shutdown a health Watch stream is told NOT_SERVING, then ended
// UNAVAILABLE: a client balancing on it moves away at once.
TEST_F(ServerBinaryTest, HealthWatchSeesNotServingThenEndsAtShutdown) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  auto context = Context();
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("");
  auto reader = stub->Watch(context.get(), request);
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  server_.process->Signal(SIGTERM);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(server_.process->Wait(absl::Seconds(30)).has_value());
}

TEST_F(ServerBinaryTest, ServesPrometheusMetrics) {
  auto stub = v1::LoadBalancer::NewStub(channel_);
  v1::PickRequest request;
  request.set_group("demo");
  v1::PickResponse response;
  ASSERT_TRUE(stub->Pick(Context().get(), request, &response).ok());

  ASSERT_OK_AND_ASSIGN(
      aside::testing::HttpResponse metrics,
      aside::testing::HttpGet("127.0.0.1", server_.metrics_port, "/metrics"));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr("aside_build_info{version="));
  EXPECT_THAT(metrics.body,
              HasSubstr("aside_picks_total{group=\"demo\",result=\"ok\"} 1"));
  EXPECT_THAT(metrics.body, HasSubstr("aside_pick_duration_seconds_count 1"));
  EXPECT_THAT(
      metrics.body,
      HasSubstr("aside_group_backends{group=\"demo\",state=\"ready\"} 2"));
}

// The metrics port answers the probes the docs name for it.
TEST_F(ServerBinaryTest, MetricsPortAnswersLivenessAndReadiness) {
  for (const char* path : {"/healthz", "/readyz"}) {
    ASSERT_OK_AND_ASSIGN(
        aside::testing::HttpResponse r,
        aside::testing::HttpGet("127.0.0.1", server_.metrics_port, path));
    EXPECT_EQ(r.status, 200) << path;
  }
}

TEST_F(ServerBinaryTest, SigtermShutsDownCleanly) {
  server_.process->Signal(SIGTERM);
  std::optional<int> status = server_.process->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << "server did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  server_.process->DrainStderr(absl::Seconds(5));
  EXPECT_THAT(server_.process->StderrText(), HasSubstr("event=server.stopped"));
}

// A stub's ReportLoad stream never half-closes by itself: SIGTERM ends it
// with UNAVAILABLE at once (the stub reports to another replica), so the
// server stops without waiting out its grace for it.
TEST(ServerBinaryShutdownTest, SigtermEndsOpenLoadReportStreams) {
  TempDir dir;
  const std::string config =
      dir.WriteFile("aside.yaml", absl::StrCat(kConfig,
                                               "shutdown_grace: 120s\n"
                                               "load_reports: {auth: open}\n"));
  ASSERT_OK_AND_ASSIGN(RunningServer server,
                       StartServer(dir, {"--config", config}));
  auto stub = v1::LoadBalancer::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  v1::ReportLoadResponse response;
  auto writer = stub->ReportLoad(&context, &response);
  v1::LoadReport report;
  report.set_reporter("stub-1");
  v1::BackendLoad* load = report.add_loads();
  load->set_group("demo");
  load->set_address("127.0.0.1:9001");
  load->set_requests(1);
  ASSERT_TRUE(writer->Write(report));
  // The stream is open on the server once the report is counted.
  ASSERT_TRUE(aside::testing::Eventually([&] {
    absl::StatusOr<aside::testing::HttpResponse> m =
        aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
    return m.ok() &&
           absl::StrContains(m->body,
                             "aside_load_reports_total{result=\"accepted\"} 1");
  }));
  server.process->Signal(SIGTERM);
  // Well inside the 120 s grace the call ends, and so does the server.
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("shutting down"));
  std::optional<int> status = server.process->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << "server waited for the report stream";
  EXPECT_TRUE(WIFEXITED(*status));
}

// A client that stopped reading (SIGSTOP) with an idle connection and an
// open Watch stream: it never closes its connection after the GOAWAY, and
// the server must not wait out its grace for it.
TEST(ServerBinaryShutdownTest, AClientThatStoppedReadingDoesNotHoldItUp) {
  TempDir dir;
  const std::string config = dir.WriteFile(
      "aside.yaml", absl::StrCat(kConfig, "shutdown_grace: 120s\n"));
  ASSERT_OK_AND_ASSIGN(RunningServer server,
                       StartServer(dir, {"--config", config}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Process> client,
                       Process::Start({"/usr/bin/python3",
                                       aside::testing::SourceDir() +
                                           "/tests/abuse/stopped_client.py",
                                       server.target(), "demo"}));
  ASSERT_OK(client->WaitForLine("event=stopped_client.ready", absl::Seconds(30))
                .status());
  client->Signal(SIGSTOP);
  server.process->Signal(SIGTERM);
  // Well inside the 120 s grace (no unary call is in flight).
  std::optional<int> status = server.process->Wait(absl::Seconds(30));
  client->Signal(SIGCONT);
  ASSERT_TRUE(status.has_value()) << "server waited for the stopped client";
  EXPECT_TRUE(WIFEXITED(*status));
}

TEST_F(ServerBinaryTest, SigintShutsDownCleanly) {
  server_.process->Signal(SIGINT);
  std::optional<int> status = server_.process->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

TEST(ServerBinaryStartupTest, RunsTheEmbeddedDemoConfigWithoutFlags) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(RunningServer server, StartServer(dir, {}));
  auto stub = v1::LoadBalancer::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  v1::PickRequest request;
  request.set_group("demo");
  v1::PickResponse response;
  grpc::Status s = stub->Pick(Context().get(), request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.backends_size(), 1);
}

// Holds a listening socket on 127.0.0.1, so the port is known to be taken.
class BusyPort {
 public:
  BusyPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 1);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~BusyPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ServerBinaryStartupTest, CheckConfigValidatesWithoutBinding) {
  TempDir dir;
  BusyPort busy;  // check-config must not try to bind the listen address
  const std::string good = dir.WriteFile(
      "good.yaml",
      "listen: 127.0.0.1:" + std::to_string(busy.port()) + "\n" + kConfig);
  auto r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--check-config", good});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ok (3 groups)"));

  const std::string bad = dir.WriteFile("bad.yaml", R"(groups:
  - name: a
    backends: [10.0.0.1:99999]
  - name: b
    policy: unknown_policy
)");
  r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--check-config", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(bad + ":3:16: groups[0].backends[0]"));
  EXPECT_THAT(r.output, HasSubstr(bad + ":5:13: groups[1].policy"));
}

TEST(ServerBinaryStartupTest, CheckConfigLoadsEveryFileTheServerWould) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  const std::string config = dir.WriteFile(
      "files.yaml", absl::StrCat("session_key_file: ", missing, "-key\n",
                                 "admin: {token_file: ", missing, "-tokens}\n",
                                 "tls: {cert_file: ", missing, ".crt, ",
                                 "key_file: ", missing, ".key}\n"));
  auto r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--check-config", config});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(missing + "-key: cannot open"));
  EXPECT_THAT(r.output, HasSubstr(missing + "-tokens: cannot open"));
  EXPECT_THAT(r.output, HasSubstr(missing + ".crt: cannot open"));
  EXPECT_THAT(r.output, HasSubstr(missing + ".key: cannot open"));

  const std::string two =
      dir.WriteFile("two.yaml", "metrics: \"\"\n---\ngroups: [{name: x}]\n");
  r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--check-config", two});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(two + ":2:1: a second YAML document"));
}

TEST(ServerBinaryStartupTest, ConfigErrorsExitBeforeBindingAnyPort) {
  TempDir dir;
  const int port = aside::testing::PickUnusedPort();
  const std::string bad =
      dir.WriteFile("bad.yaml", "groups:\n  - name: x\n    bogus: 1\n");
  auto process = Process::Start(
      {aside::testing::BinDir() + "/aside-server", "--config", bad, "--listen",
       "127.0.0.1:" + std::to_string(port), "--metrics", ""});
  ASSERT_OK(process);
  std::optional<int> status = (*process)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  (*process)->DrainStderr(absl::Seconds(5));
  EXPECT_THAT((*process)->StderrText(),
              HasSubstr(bad + ":3:5: groups[0].bogus: unknown key"));
  EXPECT_THAT((*process)->StderrText(), ::testing::Not(HasSubstr("listening")));
}

TEST(ServerBinaryStartupTest,
     SecretFilesEveryoneMayReadAreRefusedUnlessAllowed) {
  TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", "tok-0123456789abcdef admin\n");
  ASSERT_EQ(chmod(tokens.c_str(), 0644), 0);
  const std::string config = dir.WriteFile(
      "aside.yaml", absl::StrCat("admin: {token_file: ", tokens, "}\n"));
  const std::string server = aside::testing::BinDir() + "/aside-server";
  auto r = aside::testing::RunCommand({server, "--check-config", config});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(tokens + ": admin token file is readable by "
                                           "every user (mode 0644)"));
  EXPECT_THAT(r.output, HasSubstr("--allow-readable-secrets"));
  r = aside::testing::RunCommand(
      {server, "--check-config", config, "--allow-readable-secrets"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("warning: " + tokens));

  // Start-up refuses before binding anything, naming the file and the fix.
  const int port = aside::testing::PickUnusedPort();
  auto process = Process::Start(
      {server, "--config", config, "--state-dir", dir.path() + "/state",
       "--listen", "127.0.0.1:" + std::to_string(port), "--metrics", ""});
  ASSERT_OK(process);
  std::optional<int> status = (*process)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  (*process)->DrainStderr(absl::Seconds(5));
  EXPECT_THAT(
      (*process)->StderrText(),
      AllOf(HasSubstr(tokens + ": admin token file is readable"),
            HasSubstr("chmod o-r"), HasSubstr("--allow-readable-secrets")));
  EXPECT_THAT((*process)->StderrText(), ::testing::Not(HasSubstr("listening")));

  // Group-readable (a Kubernetes Secret for the pod's fsGroup, 0440) passes.
  ASSERT_EQ(chmod(tokens.c_str(), 0440), 0);
  r = aside::testing::RunCommand({server, "--check-config", config});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ServerBinaryStartupTest, UnknownFlagIsAUsageError) {
  auto r = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--listne", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown flag '--listne'"));
}

}  // namespace
}  // namespace aside
