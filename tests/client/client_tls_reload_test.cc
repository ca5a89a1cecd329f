// The stub's TLS files are followed, not read once: the server moves to a
// certificate from a new CA, the client's CA bundle is swapped the way
// Kubernetes swaps a mounted Secret, and the running stub connects to the
// new server without a restart. Real aside-server, real certificates
// (openssl), loopback; every wait is bounded.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

namespace fs = std::filesystem;
using ::aside::testing::RunCommand;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;

constexpr absl::Duration kDeadline = absl::Seconds(30);

bool RunOk(std::vector<std::string> argv) {
  aside::testing::CommandResult r = RunCommand(std::move(argv));
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

// A self-signed CA in `dir` (ca.crt, ca.key).
bool MakeCa(const fs::path& dir, const std::string& cn) {
  fs::create_directories(dir);
  return RunOk({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                "/CN=" + cn, "-keyout", (dir / "ca.key").string(), "-out",
                (dir / "ca.crt").string()});
}

// A server certificate for localhost signed by the CA in `ca`, in `dir`
// (tls.crt, tls.key).
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

// A config serving group `web` with `backends` over TLS from `leaf`.
std::string Config(const fs::path& leaf,
                   const std::vector<std::string>& backends) {
  std::string config =
      "groups:\n  - name: web\n    health_check: {kind: none}\n"
      "    backends:\n";
  for (const std::string& b : backends) {
    absl::StrAppend(&config, "      - ", b, "\n");
  }
  absl::StrAppend(&config, "tls:\n  cert_file: ", (leaf / "tls.crt").string(),
                  "\n  key_file: ", (leaf / "tls.key").string(), "\n");
  return config;
}

// grpc.health.v1 Check over `credentials`, verifying the name `name`.
grpc::Status HealthCheck(const std::string& target,
                         std::shared_ptr<grpc::ChannelCredentials> credentials,
                         const std::string& name) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(name);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateCustomChannel(target, std::move(credentials), args));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  return stub->Check(&context, request, &response);
}

size_t Members(ClientGroup* group) {
  TableConstPtr table = group->table();
  return table == nullptr ? 0 : table->members().size();
}

bool WaitForMembers(ClientGroup* group, size_t n) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (absl::Now() < deadline) {
    if (Members(group) == n) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));  // poll interval, not a sync
  }
  return false;
}

class ClientTlsReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(dir_.path());
    ASSERT_TRUE(MakeCa(root_ / "ca-one", "aside-ca-one"));
    ASSERT_TRUE(MakeCa(root_ / "ca-two", "aside-ca-two"));
    ASSERT_TRUE(MakeLeaf(root_ / "ca-one", root_ / "leaf-one", "aside-one"));
    ASSERT_TRUE(MakeLeaf(root_ / "ca-two", root_ / "leaf-two", "aside-two"));
  }

  // Starts aside-server on `port` (0: any) with `config`.
  void Start(int port, const std::string& name, const std::string& config) {
    std::vector<std::string> extra = {"--config",
                                      dir_.WriteFile(name + ".yaml", config)};
    if (port != 0) {
      extra.insert(extra.end(), {"--listen", absl::StrCat("127.0.0.1:", port)});
    }
    ASSERT_OK_AND_ASSIGN(server_, aside::testing::StartServer(
                                      dir_.path() + "/state-" + name, extra));
  }

  void Stop() {
    server_.process->Signal(SIGKILL);
    ASSERT_TRUE(server_.process->Wait(absl::Seconds(10)).has_value());
  }

  TempDir dir_;
  fs::path root_;
  RunningServer server_;
};

TEST_F(ClientTlsReloadTest, StubFollowsACaBundleRotatedToANewCa) {
  // The client's CA bundle as a Secret volume: ca.crt -> ..data/ca.crt,
  // ..data -> ..v1, swapped at once to ..v2.
  const fs::path volume = root_ / "client-ca";
  fs::create_directories(volume / "..v1");
  fs::create_directories(volume / "..v2");
  fs::copy_file(root_ / "ca-one" / "ca.crt", volume / "..v1" / "ca.crt");
  fs::copy_file(root_ / "ca-two" / "ca.crt", volume / "..v2" / "ca.crt");
  fs::create_directory_symlink("..v1", volume / "..data");
  fs::create_symlink("..data/ca.crt", volume / "ca.crt");

  ASSERT_NO_FATAL_FAILURE(
      Start(0, "one", Config(root_ / "leaf-one", {"10.0.0.1:80"})));
  const int port = server_.grpc_port;

  ClientOptions options;
  options.targets = {server_.target()};
  options.groups = {"web"};
  options.report_interval = absl::ZeroDuration();
  options.tls.enabled = true;
  options.tls.ca_file = (volume / "ca.crt").string();
  options.tls.server_name = "localhost";
  options.tls.reload_interval = absl::Seconds(1);
  // Quick reconnects, so that the test waits on the files, not the backoff.
  options.backoff.initial = absl::Milliseconds(100);
  options.backoff.max = absl::Milliseconds(500);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> stub, Client::Create(options));
  ClientGroup* web = stub->Group("web");
  ASSERT_TRUE(WaitForMembers(web, 1));

  // The server moves to a certificate from the second CA (a restart on the
  // same port; its table now has two backends).
  ASSERT_NO_FATAL_FAILURE(Stop());
  ASSERT_NO_FATAL_FAILURE(Start(
      port, "two", Config(root_ / "leaf-two", {"10.0.0.1:80", "10.0.0.2:80"})));
  // What the stub was started with no longer verifies the server...
  grpc::SslCredentialsOptions first;
  first.pem_root_certs = ReadAll(root_ / "ca-one" / "ca.crt");
  EXPECT_EQ(
      HealthCheck(server_.target(), grpc::SslCredentials(first), "localhost")
          .error_code(),
      grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Members(web), 1u);

  // ...until its CA bundle is rotated: the running stub reads the new one
  // and takes the new server's table.
  fs::create_directory_symlink("..v2", volume / "..data_tmp");
  fs::rename(volume / "..data_tmp", volume / "..data");
  EXPECT_TRUE(WaitForMembers(web, 2)) << Members(web);
}

TEST_F(ClientTlsReloadTest, FollowedFilesStillVerifyChainAndName) {
  ASSERT_NO_FATAL_FAILURE(
      Start(0, "one", Config(root_ / "leaf-one", {"10.0.0.1:80"})));
  TlsOptions tls;
  tls.enabled = true;
  tls.ca_file = (root_ / "ca-one" / "ca.crt").string();
  tls.reload_interval = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(auto credentials, MakeCredentials(tls));
  EXPECT_TRUE(HealthCheck(server_.target(), credentials, "localhost").ok());
  // A name the certificate does not carry.
  EXPECT_EQ(
      HealthCheck(server_.target(), credentials, "other.example").error_code(),
      grpc::StatusCode::UNAVAILABLE);
  // A CA that did not sign it.
  tls.ca_file = (root_ / "ca-two" / "ca.crt").string();
  ASSERT_OK_AND_ASSIGN(auto other, MakeCredentials(tls));
  EXPECT_EQ(HealthCheck(server_.target(), other, "localhost").error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Missing files are named at creation, not left to fail handshakes.
  tls.ca_file = (root_ / "missing" / "ca.crt").string();
  EXPECT_THAT(MakeCredentials(tls).status().message(),
              ::testing::HasSubstr("missing/ca.crt"));
}

}  // namespace
}  // namespace aside
