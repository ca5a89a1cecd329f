// Reloading without a restart, end to end: the real aside-server binary, a
// real config file changed under it (rewritten, swapped the way a
// Kubernetes ConfigMap volume swaps its `..data` symlink, or announced with
// SIGHUP), Watch streams that stay open across the change, and a TLS
// certificate rotated under established connections. Every wait is bounded
// and polls the server's metrics or a stream with a deadline.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

namespace fs = std::filesystem;
using ::aside::testing::Context;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(20);
constexpr char kToken[] = "reload-test-admin-token";

// Two groups; `web_weight` changes the first backend of `web`.
std::string Config(int web_weight, const std::string& extra = "",
                   bool with_api = true, const std::string& more_groups = "") {
  std::string out =
      absl::StrCat("config_reload: {interval: 100ms}\n", extra, "groups:\n",
                   "  - name: web\n"
                   "    health_check: {kind: none}\n"
                   "    policy: weighted_round_robin\n"
                   "    backends:\n"
                   "      - {address: 127.0.0.1:9001, weight: ",
                   web_weight,
                   "}\n"
                   "      - 127.0.0.1:9002\n"
                   "      - 127.0.0.1:9003\n"
                   "      - 127.0.0.1:9004\n"
                   "      - 127.0.0.1:9005\n"
                   "      - 127.0.0.1:9006\n");
  if (with_api) {
    absl::StrAppend(&out,
                    "  - name: api\n"
                    "    health_check: {kind: none}\n"
                    "    backends: [127.0.0.1:9101, 127.0.0.1:9102]\n");
  }
  absl::StrAppend(&out, more_groups);
  return out;
}

// Replaces `path` atomically (write aside, rename over), as editors and
// config management do.
void ReplaceFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary | std::ios::trunc) << content;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

std::string Metrics(const RunningServer& server) {
  absl::StatusOr<aside::testing::HttpResponse> r =
      aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
  return r.ok() ? r->body : "";
}

// Polls /metrics until it holds `needle` (bounded).
bool WaitForMetric(const RunningServer& server, const std::string& needle) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (absl::Now() < deadline) {
    if (Metrics(server).find(needle) != std::string::npos) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));  // poll interval, not a sync
  }
  ADD_FAILURE() << "no '" << needle << "' in /metrics:\n" << Metrics(server);
  return false;
}

absl::StatusOr<uint64_t> Generation(v1::LoadBalancer::Stub& stub,
                                    const std::string& group) {
  v1::PickRequest request;
  request.set_group(group);
  v1::PickResponse response;
  grpc::Status s = stub.Pick(Context().get(), request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  return response.generation();
}

// An open Watch stream with a deadline on every read.
class WatchStream {
 public:
  WatchStream(v1::LoadBalancer::Stub& stub, std::vector<std::string> groups) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(60));
    v1::WatchRequest request;
    for (const std::string& g : groups) {
      request.add_groups(g);
    }
    reader_ = stub.Watch(&context_, request);
  }
  ~WatchStream() {
    context_.TryCancel();
    v1::GroupUpdate ignored;
    while (reader_->Read(&ignored)) {
    }
    reader_->Finish();
  }
  bool Read(v1::GroupUpdate* update) { return reader_->Read(update); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> reader_;
};

class ReloadTest : public ::testing::Test {
 protected:
  void Start(const std::string& config,
             std::vector<std::string> extra_flags = {}) {
    config_ = dir_.WriteFile("aside.yaml", config);
    std::vector<std::string> flags = {"--config", config_};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    ASSERT_OK_AND_ASSIGN(
        server_, aside::testing::StartServer(dir_.path() + "/state", flags));
    channel_ = grpc::CreateChannel(server_.target(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::LoadBalancer::NewStub(channel_);
  }

  // Replaces the config file with `content`, which the server must refuse
  // (its first refusal): the event=config.reload_failed line it logged, or
  // "" (with a failure recorded) when it did not refuse in time.
  std::string ExpectRefusedReload(const std::string& content) {
    ReplaceFile(config_, content);
    EXPECT_TRUE(WaitForMetric(
        server_, "aside_config_reloads_total{result=\"failure\"} 1"));
    absl::StatusOr<std::string> line =
        server_.process->WaitForLine("event=config.reload_failed", kDeadline);
    EXPECT_OK(line.status());
    return line.ok() ? *line : "";
  }

  // A failure shows what the server logged.
  void TearDown() override {
    if (HasFailure() && server_.process != nullptr) {
      server_.process->Signal(SIGTERM);
      server_.process->DrainStderr(absl::Seconds(10));
      std::cerr << "server log:\n" << server_.process->StderrText();
    }
  }

  TempDir dir_;
  std::string config_;
  RunningServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

TEST_F(ReloadTest, ChangedGroupGetsNewGenerationAndOpenWatchGetsDelta) {
  Start(Config(100));
  WatchStream watch(*stub_, {"web", "api"});
  std::map<std::string, uint64_t> first;
  for (int i = 0; i < 2; ++i) {
    v1::GroupUpdate update;
    ASSERT_TRUE(watch.Read(&update));
    ASSERT_TRUE(update.has_full()) << update.DebugString();
    first[update.group()] = update.generation();
  }
  ASSERT_EQ(first.size(), 2u);

  ReplaceFile(config_, Config(300));
  ASSERT_TRUE(WaitForMetric(
      server_, "aside_config_reloads_total{result=\"success\"} 1"));

  // The stream that stayed open gets web's change as a delta...
  v1::GroupUpdate update;
  ASSERT_TRUE(watch.Read(&update));
  EXPECT_EQ(update.group(), "web");
  EXPECT_GT(update.generation(), first["web"]);
  ASSERT_TRUE(update.has_delta()) << update.DebugString();
  EXPECT_EQ(update.delta().base_generation(), first["web"]);
  ASSERT_EQ(update.delta().upserted_size(), 1);
  EXPECT_EQ(update.delta().upserted(0).backend().address(), "127.0.0.1:9001");
  EXPECT_EQ(update.delta().upserted(0).backend().weight(), 300u);
  // ...and api, unchanged, keeps its generation.
  ASSERT_OK_AND_ASSIGN(uint64_t api, Generation(*stub_, "api"));
  EXPECT_EQ(api, first["api"]);
  ASSERT_OK_AND_ASSIGN(uint64_t web, Generation(*stub_, "web"));
  EXPECT_EQ(web, update.generation());
  EXPECT_THAT(Metrics(server_),
              HasSubstr("aside_config_last_reload_successful 1"));
  EXPECT_THAT(Metrics(server_), HasSubstr("aside_config_restart_required 0"));
}

TEST_F(ReloadTest, InvalidFileChangesNothingAndIsCountedWithFileAndLine) {
  Start(Config(100));
  ASSERT_OK_AND_ASSIGN(uint64_t web, Generation(*stub_, "web"));
  ASSERT_OK_AND_ASSIGN(uint64_t api, Generation(*stub_, "api"));

  // Line 7 holds the bad weight; the new group on the same file must not
  // appear either (the file is taken whole or not at all).
  const std::string bad =
      Config(20000, "", true,
             "  - name: extra\n    health_check: {kind: none}\n"
             "    backends: [127.0.0.1:9201]\n");
  const std::string line = ExpectRefusedReload(bad);
  ASSERT_FALSE(line.empty());
  EXPECT_THAT(line, HasSubstr(absl::StrCat(config_, ":7:")));
  EXPECT_THAT(line, HasSubstr("groups[0].backends[0].weight"));
  const std::string metrics = Metrics(server_);
  EXPECT_THAT(metrics, HasSubstr("aside_config_last_reload_successful 0"));
  EXPECT_THAT(metrics,
              HasSubstr("aside_config_reloads_total{result=\"success\"} 0"));

  // The old config keeps serving, untouched.
  EXPECT_EQ(Generation(*stub_, "web").value_or(0), web);
  EXPECT_EQ(Generation(*stub_, "api").value_or(0), api);
  EXPECT_EQ(Generation(*stub_, "extra").status().code(),
            absl::StatusCode::kNotFound);

  // Fixing the file applies it.
  ReplaceFile(config_,
              Config(100, "", true,
                     "  - name: extra\n    health_check: {kind: none}\n"
                     "    backends: [127.0.0.1:9201]\n"));
  ASSERT_TRUE(WaitForMetric(
      server_, "aside_config_reloads_total{result=\"success\"} 1"));
  EXPECT_TRUE(Generation(*stub_, "extra").ok());
  EXPECT_EQ(Generation(*stub_, "web").value_or(0), web);
  EXPECT_THAT(Metrics(server_),
              HasSubstr("aside_config_last_reload_successful 1"));
}

TEST_F(ReloadTest, ConfigMapSymlinkSwapIsFollowed) {
  // The layout of a ConfigMap volume: aside.yaml -> ..data/aside.yaml,
  // ..data -> a timestamped directory, replaced by renaming a new symlink
  // over ..data.
  const fs::path volume = fs::path(dir_.path()) / "configmap";
  fs::create_directories(volume / "..2026_12_01_08_00_00.1");
  std::ofstream(volume / "..2026_12_01_08_00_00.1" / "aside.yaml")
      << Config(100);
  fs::create_directory_symlink("..2026_12_01_08_00_00.1", volume / "..data");
  fs::create_symlink("..data/aside.yaml", volume / "aside.yaml");
  const std::string path = (volume / "aside.yaml").string();
  ASSERT_OK_AND_ASSIGN(
      server_,
      aside::testing::StartServer(dir_.path() + "/state", {"--config", path}));
  auto stub = v1::LoadBalancer::NewStub(grpc::CreateChannel(
      server_.target(), grpc::InsecureChannelCredentials()));
  ASSERT_OK_AND_ASSIGN(uint64_t web, Generation(*stub, "web"));

  fs::create_directories(volume / "..2026_12_01_08_05_00.2");
  std::ofstream(volume / "..2026_12_01_08_05_00.2" / "aside.yaml")
      << Config(100, "", true,
                "  - name: added\n    health_check: {kind: none}\n"
                "    backends: [127.0.0.1:9301]\n");
  fs::create_directory_symlink("..2026_12_01_08_05_00.2",
                               volume / "..data_tmp");
  fs::rename(volume / "..data_tmp", volume / "..data");
  fs::remove_all(volume / "..2026_12_01_08_00_00.1");

  ASSERT_TRUE(WaitForMetric(
      server_, "aside_config_reloads_total{result=\"success\"} 1"));
  EXPECT_TRUE(Generation(*stub, "added").ok());
  EXPECT_EQ(Generation(*stub, "web").value_or(0), web);
}

TEST_F(ReloadTest, SighupReloadsAndRestartOnlySettingsAreReported) {
  // Not watching: only SIGHUP reloads.
  Start(absl::StrReplaceAll(Config(100), {{"config_reload: {interval: 100ms}",
                                           "config_reload: {watch: false}"}}));
  ReplaceFile(
      config_,
      absl::StrReplaceAll(
          Config(100, "limits: {max_groups: 50}\nlog_level: debug\n", true,
                 "  - name: added\n    health_check: {kind: none}\n"
                 "    backends: [127.0.0.1:9301]\n"),
          {{"config_reload: {interval: 100ms}",
            "config_reload: {watch: false}"}}));
  server_.process->Signal(SIGHUP);
  ASSERT_TRUE(WaitForMetric(
      server_, "aside_config_reloads_total{result=\"success\"} 1"));
  EXPECT_TRUE(Generation(*stub_, "added").ok());
  EXPECT_THAT(Metrics(server_), HasSubstr("aside_config_restart_required 1"));
  ASSERT_OK_AND_ASSIGN(
      std::string line,
      server_.process->WaitForLine("event=config.restart_required", kDeadline));
  EXPECT_THAT(line, HasSubstr("limits.max_groups"));
  // log_level is live: debug lines follow.
  EXPECT_TRUE(
      server_.process->WaitForLine("event=config.reloaded", kDeadline).ok());

  // The process still stops cleanly on SIGTERM.
  stub_.reset();
  channel_.reset();
  server_.process->Signal(SIGTERM);
  std::optional<int> status = server_.process->Wait(kDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
}

TEST_F(ReloadTest, RemovedGroupEndsItsWatchWithGroupRemoved) {
  Start(Config(100));
  WatchStream watch(*stub_, {"api"});
  v1::GroupUpdate update;
  ASSERT_TRUE(watch.Read(&update));
  ASSERT_TRUE(update.has_full());
  const uint64_t first = update.generation();

  ReplaceFile(config_, Config(100, "", /*with_api=*/false));
  ASSERT_TRUE(watch.Read(&update));
  EXPECT_EQ(update.group(), "api");
  ASSERT_TRUE(update.has_removed()) << update.DebugString();
  EXPECT_EQ(update.removed().cause(), v1::GroupRemoved::CAUSE_DELETED);
  EXPECT_GT(update.generation(), first);
  EXPECT_EQ(Generation(*stub_, "api").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Generation(*stub_, "web").ok());

  // Put back, the same stream gets its full table again.
  ReplaceFile(config_, Config(100));
  ASSERT_TRUE(watch.Read(&update));
  EXPECT_EQ(update.group(), "api");
  EXPECT_TRUE(update.has_full()) << update.DebugString();
}

TEST_F(ReloadTest, ConfigGroupNamedLikeAnAdminGroupFailsTheReload) {
  const std::string tokens =
      dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  Start(Config(100), {"--admin-token-file", tokens});
  v1::CreateGroupRequest create;
  create.mutable_group()->set_name("owned");
  v1::Group created;
  grpc::Status s = v1::Admin::NewStub(channel_)->CreateGroup(
      Context(kToken).get(), create, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const uint64_t owned = created.generation();
  ASSERT_GT(owned, 0u);

  const std::string line =
      ExpectRefusedReload(Config(300, "", true,
                                 "  - name: owned\n    health_check: {kind: "
                                 "none}\n    backends: [127.0.0.1:9401]\n"));
  ASSERT_FALSE(line.empty());
  EXPECT_THAT(line, HasSubstr(absl::StrCat(config_, ":16:")));
  EXPECT_THAT(line, HasSubstr("Admin API"));
  // Nothing changed: not the Admin group, not web.
  auto admin = v1::Admin::NewStub(channel_);
  v1::GetGroupRequest get;
  get.set_name("owned");
  v1::Group group;
  s = admin->GetGroup(Context(kToken).get(), get, &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(group.generation(), owned);
  EXPECT_EQ(group.backends_size(), 0);
  get.set_name("web");
  s = admin->GetGroup(Context(kToken).get(), get, &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(group.backends(0).weight(), 100u);
}

// A reload is checked against the whole namespace before any step: a file
// group whose alias an Admin group holds (in another spelling) refuses the
// reload, and nothing else in the file is applied. A start with the same
// file reaches the same decision.
TEST_F(ReloadTest, AnAliasCollisionWithAnAdminGroupChangesNothing) {
  const std::string tokens =
      dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  Start(Config(100), {"--admin-token-file", tokens});
  v1::CreateGroupRequest create;
  create.mutable_group()->set_name("owned");
  create.mutable_group()->add_aliases("shop.example");
  v1::Group created;
  grpc::Status s = v1::Admin::NewStub(channel_)->CreateGroup(
      Context(kToken).get(), create, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();

  // web changes and a new group takes the Admin group's alias.
  const std::string colliding =
      Config(300, "", true,
             "  - name: store\n    health_check: {kind: none}\n"
             "    aliases: [Shop.Example.]\n    backends: [127.0.0.1:9401]\n");
  const std::string line = ExpectRefusedReload(colliding);
  ASSERT_FALSE(line.empty());
  EXPECT_THAT(line, HasSubstr(absl::StrCat(config_, ":16:")));
  EXPECT_THAT(line, HasSubstr("alias 'Shop.Example.' is already an alias of "
                              "group 'owned' (created through Admin)"));
  EXPECT_THAT(Metrics(server_),
              HasSubstr("aside_config_last_reload_successful 0"));
  auto admin = v1::Admin::NewStub(channel_);
  v1::GetGroupRequest get;
  v1::Group group;
  get.set_name("web");
  s = admin->GetGroup(Context(kToken).get(), get, &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(group.backends(0).weight(), 100u);  // not 300
  get.set_name("store");
  EXPECT_EQ(admin->GetGroup(Context(kToken).get(), get, &group).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_name("owned");
  s = admin->GetGroup(Context(kToken).get(), get, &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(group.aliases_size(), 1);

  // Restarted on the same file and state: refused, naming file:line and
  // the Admin group, and the state is untouched.
  server_.process->Signal(SIGTERM);
  ASSERT_TRUE(server_.process->Wait(kDeadline).has_value());
  server_.process.reset();
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<aside::testing::Process> again,
      aside::testing::Process::Start(
          {aside::testing::BinDir() + "/aside-server", "--listen",
           "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--state-dir",
           dir_.path() + "/state", "--config", config_, "--admin-token-file",
           tokens}));
  const std::optional<int> code = again->Wait(kDeadline);
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  again->DrainStderr(absl::Seconds(10));
  const std::string log = again->StderrText();
  EXPECT_THAT(log, HasSubstr(absl::StrCat(config_,
                                          ":16: groups[2].aliases[0]: "
                                          "alias 'Shop.Example.' is already "
                                          "an alias of group 'owned'")));

  // The Admin group is still there once the file no longer collides.
  ReplaceFile(config_, Config(100));
  Start(Config(100), {"--admin-token-file", tokens});
  get.set_name("owned");
  s = v1::Admin::NewStub(channel_)->GetGroup(Context(kToken).get(), get,
                                             &group);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(group.aliases(0), "shop.example");
}

// --- TLS ----------------------------------------------------------------

bool RunOk(std::vector<std::string> argv) {
  auto r = aside::testing::RunCommand(std::move(argv));
  if (r.exit_code != 0) {
    ADD_FAILURE() << r.output;
  }
  return r.exit_code == 0;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A CA and a server certificate for `cn` (SAN localhost) in `dir`.
bool MakeLeaf(const fs::path& ca, const fs::path& dir, const std::string& cn) {
  fs::create_directories(dir);
  const std::string ext = (dir / "ext").string();
  std::ofstream(ext) << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  return RunOk({"openssl", "req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=" + cn,
                "-keyout", (dir / "tls.key").string(), "-out",
                (dir / "tls.csr").string()}) &&
         RunOk({"openssl", "x509", "-req", "-in", (dir / "tls.csr").string(),
                "-CA", (ca / "ca.crt").string(), "-CAkey",
                (ca / "ca.key").string(), "-CAcreateserial", "-days", "2",
                "-extfile", ext, "-out", (dir / "tls.crt").string()});
}

// The common name of the certificate the server presented on the
// connection that carried a Pick.
std::string PresentedName(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::LoadBalancer::NewStub(channel);
  v1::PickRequest request;
  request.set_group("web");
  v1::PickResponse response;
  auto context = Context();
  grpc::Status s = stub->Pick(context.get(), request, &response);
  if (!s.ok()) {
    return "error: " + s.error_message();
  }
  std::vector<grpc::string_ref> names =
      context->auth_context()->FindPropertyValues("x509_common_name");
  return names.empty() ? "" : std::string(names[0].data(), names[0].size());
}

TEST_F(ReloadTest, RotatedCertificateServesNewConnectionsAndKeepsOldOnes) {
  const fs::path ca = fs::path(dir_.path()) / "ca";
  fs::create_directories(ca);
  ASSERT_TRUE(
      RunOk({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
             "/CN=aside-test-ca", "-keyout", (ca / "ca.key").string(), "-out",
             (ca / "ca.crt").string()}));
  // A Secret volume: tls.crt and tls.key through ..data, swapped at once.
  const fs::path volume = fs::path(dir_.path()) / "tls";
  ASSERT_TRUE(MakeLeaf(ca, volume / "..v1", "aside-one"));
  ASSERT_TRUE(MakeLeaf(ca, volume / "..v2", "aside-two"));
  fs::create_directory_symlink("..v1", volume / "..data");
  fs::create_symlink("..data/tls.crt", volume / "tls.crt");
  fs::create_symlink("..data/tls.key", volume / "tls.key");
  Start(absl::StrCat(Config(100),
                     "tls:\n  cert_file: ", (volume / "tls.crt").string(),
                     "\n  key_file: ", (volume / "tls.key").string(), "\n"));

  const std::string root = ReadAll(ca / "ca.crt");
  auto connect = [&] {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = root;
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    // Its own connection, not one shared with an earlier channel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(server_.target(),
                                     grpc::SslCredentials(options), args);
  };
  std::shared_ptr<grpc::Channel> before = connect();
  ASSERT_EQ(PresentedName(before), "aside-one");

  fs::create_directory_symlink("..v2", volume / "..data_tmp");
  fs::rename(volume / "..data_tmp", volume / "..data");

  // New connections see the new certificate once the watcher read it.
  const absl::Time deadline = absl::Now() + kDeadline;
  std::string seen;
  while (absl::Now() < deadline) {
    seen = PresentedName(connect());
    if (seen == "aside-two") {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));  // poll interval, not a sync
  }
  ASSERT_EQ(seen, "aside-two");
  // The connection made before the rotation still works, on its original
  // handshake.
  EXPECT_EQ(PresentedName(before), "aside-one");
  EXPECT_EQ(before->GetState(false), GRPC_CHANNEL_READY);
}

}  // namespace
}  // namespace aside
