// Admin against the real server binary: grpcurl-style JSON with a token,
// durability under repeated SIGKILL, and TLS / mTLS with real certificates.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <atomic>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lib/sync.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/process.h"
#include "tests/testing/reflection_client.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Context;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kToken[] = "integration-admin-token-42";

TEST(AdminBinaryTest, GrpcurlStyleJsonWithATokenHeader) {
  TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      aside::testing::StartServer(dir.path() + "/state",
                                  {"--admin-token-file", tokens}));
  auto channel =
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  aside::testing::ReflectionClient grpcurl(channel);
  const std::multimap<std::string, std::string> auth = {
      {"authorization", absl::StrCat("Bearer ", kToken)}};

  ASSERT_OK_AND_ASSIGN(
      std::string created,
      grpcurl.CallJson(
          "aside.v1.Admin", "CreateGroup",
          R"({"group":{"name":"payments","healthCheck":{"kind":"NONE"},
                           "backends":[{"address":"127.0.0.1:8080","weight":2}]}})",
          auth));
  EXPECT_THAT(created, HasSubstr("\"name\":\"payments\""));
  EXPECT_THAT(created, HasSubstr("GROUP_SOURCE_STORE"));

  ASSERT_OK_AND_ASSIGN(
      std::string listed,
      grpcurl.CallJson("aside.v1.Admin", "ListGroups", "{}", auth));
  EXPECT_THAT(listed, HasSubstr("payments"));

  EXPECT_THAT(grpcurl.CallJson("aside.v1.Admin", "ListGroups", "{}"),
              aside::testing::StatusIs(absl::StatusCode::kUnauthenticated,
                                       HasSubstr("Bearer")));
  EXPECT_THAT(
      grpcurl.CallJson(
          "aside.v1.Admin", "AddBackends",
          R"({"group":"payments","backends":[{"address":"1.2.3.4"}]})", auth),
      aside::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("backends[0].address")));

  ASSERT_OK_AND_ASSIGN(std::string pick,
                       grpcurl.CallJson("aside.v1.LoadBalancer", "Pick",
                                        R"({"group":"payments"})"));
  EXPECT_THAT(pick, HasSubstr("127.0.0.1:8080"));
}

// The durable state the test expects: group -> address -> drained.
using Model = std::map<std::string, std::map<std::string, bool>>;

// Reads every store-owned group back from a running server.
Model ReadBack(v1::Admin::Stub& admin, uint64_t* max_generation) {
  Model out;
  v1::ListGroupsResponse list;
  grpc::Status s = admin.ListGroups(Context(kToken).get(), {}, &list);
  EXPECT_TRUE(s.ok()) << s.error_message();
  for (const v1::Group& summary : list.groups()) {
    if (summary.source() != v1::GROUP_SOURCE_STORE) {
      continue;
    }
    v1::GetGroupRequest get;
    get.set_name(summary.name());
    v1::Group g;
    EXPECT_TRUE(admin.GetGroup(Context(kToken).get(), get, &g).ok());
    auto& backends = out[g.name()];
    for (const v1::Backend& b : g.backends()) {
      backends[b.address()] = b.drained();
    }
    *max_generation = std::max(*max_generation, g.generation());
  }
  return out;
}

// One random Admin mutation, applied to `after` as the server should.
struct Mutation {
  std::function<grpc::Status(v1::Admin::Stub&, uint64_t*)> call;
  Model after;  // the model if it succeeds
};

Mutation RandomMutation(const Model& model, std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const std::string group = absl::StrCat("g", pick(4));
  const std::string address = absl::StrCat("127.0.0.1:", 9000 + pick(6));
  Mutation m;
  m.after = model;
  const bool exists = model.contains(group);
  switch (pick(5)) {
    case 0: {  // create (fails if it exists)
      if (!exists) {
        m.after[group][address] = false;
      }
      m.call = [group, address](v1::Admin::Stub& a, uint64_t* gen) {
        v1::CreateGroupRequest r;
        r.mutable_group()->set_name(group);
        r.mutable_group()->mutable_health_check()->set_kind(
            v1::HealthCheck::NONE);
        r.mutable_group()->add_backends()->set_address(address);
        v1::Group g;
        grpc::Status s = a.CreateGroup(Context(kToken).get(), r, &g);
        *gen = g.generation();
        return s;
      };
      break;
    }
    case 1: {  // delete
      m.after.erase(group);
      m.call = [group](v1::Admin::Stub& a, uint64_t* gen) {
        v1::DeleteGroupRequest r;
        r.set_name(group);
        v1::DeleteGroupResponse d;
        grpc::Status s = a.DeleteGroup(Context(kToken).get(), r, &d);
        *gen = d.generation();
        return s;
      };
      break;
    }
    case 2: {  // add a backend (fails if present or no group)
      if (exists && !model.at(group).contains(address)) {
        m.after[group][address] = false;
      }
      m.call = [group, address](v1::Admin::Stub& a, uint64_t* gen) {
        v1::AddBackendsRequest r;
        r.set_group(group);
        r.add_backends()->set_address(address);
        v1::Group g;
        grpc::Status s = a.AddBackends(Context(kToken).get(), r, &g);
        *gen = g.generation();
        return s;
      };
      break;
    }
    case 3: {  // remove a backend
      if (exists && model.at(group).contains(address)) {
        m.after[group].erase(address);
      }
      m.call = [group, address](v1::Admin::Stub& a, uint64_t* gen) {
        v1::RemoveBackendsRequest r;
        r.set_group(group);
        r.add_addresses(address);
        v1::Group g;
        grpc::Status s = a.RemoveBackends(Context(kToken).get(), r, &g);
        *gen = g.generation();
        return s;
      };
      break;
    }
    default: {  // drain or undrain
      const bool drained = pick(2) == 0;
      if (exists && model.at(group).contains(address)) {
        m.after[group][address] = drained;
      }
      m.call = [group, address, drained](v1::Admin::Stub& a, uint64_t* gen) {
        v1::DrainBackendsRequest r;
        r.set_group(group);
        r.add_addresses(address);
        r.set_drained(drained);
        v1::Group g;
        grpc::Status s = a.DrainBackends(Context(kToken).get(), r, &g);
        *gen = g.generation();
        return s;
      };
      break;
    }
  }
  return m;
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open";
  }
  sqlite3_stmt* st = nullptr;
  std::string result = "no result";
  if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) ==
          SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    result = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return result;
}

TEST(AdminBinaryTest, AcknowledgedMutationsSurviveRepeatedSigkill) {
  TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  const std::string state = dir.path() + "/state";
  std::mt19937 rng(20261129);
  Model model;
  uint64_t max_generation = 0;
  int kills = 0;
  int acknowledged = 0;
  int refused = 0;
  int in_doubt = 0;

  for (int round = 0; round < 24; ++round) {
    ASSERT_OK_AND_ASSIGN(
        RunningServer server,
        aside::testing::StartServer(
            state, {"--admin-token-file", tokens, "--metrics", ""}));
    auto admin = v1::Admin::NewStub(grpc::CreateChannel(
        server.target(), grpc::InsecureChannelCredentials()));

    // Everything acknowledged before the last kill is there, nothing refused
    // is, and generations went up.
    uint64_t generation_now = 0;
    const Model observed = ReadBack(*admin, &generation_now);
    ASSERT_EQ(observed, model) << "after restart " << round;
    if (!model.empty()) {
      EXPECT_GT(generation_now, max_generation) << "round " << round;
    }
    max_generation = std::max(max_generation, generation_now);

    // Mutate until the server is killed under us, at a random moment.
    std::atomic<bool> killed{false};
    std::thread killer(
        [&, delay = std::uniform_int_distribution<int>(5, 120)(rng)] {
          // The delay only picks a random point to crash at; nothing waits on
          // it.
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
          server.process->Signal(SIGKILL);
          killed = true;
        });
    for (int step = 0; step < 10000; ++step) {
      Mutation m = RandomMutation(model, rng);
      uint64_t generation = 0;
      grpc::Status s = m.call(*admin, &generation);
      if (s.ok()) {
        ++acknowledged;
        model = m.after;
        EXPECT_GT(generation, max_generation);
        max_generation = std::max(max_generation, generation);
      } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                 s.error_code() == grpc::StatusCode::CANCELLED ||
                 s.error_code() == grpc::StatusCode::INTERNAL) {
        // Killed mid-call: it may or may not have been applied. The next
        // start shows which; both are correct.
        ++in_doubt;
        killer.join();
        server.process->Wait(absl::Seconds(30));
        ASSERT_EQ(IntegrityCheck(state + "/aside.db"), "ok");
        ASSERT_OK_AND_ASSIGN(
            RunningServer probe,
            aside::testing::StartServer(
                state, {"--admin-token-file", tokens, "--metrics", ""}));
        auto probe_admin = v1::Admin::NewStub(grpc::CreateChannel(
            probe.target(), grpc::InsecureChannelCredentials()));
        uint64_t g = 0;
        const Model now = ReadBack(*probe_admin, &g);
        ASSERT_TRUE(now == model || now == m.after)
            << "a mutation in flight at the kill left a partial state";
        model = now;
        probe.process->Signal(SIGKILL);
        probe.process->Wait(absl::Seconds(30));
        ++kills;
        break;
      } else {
        ++refused;  // validation or conflict: must change nothing
        ASSERT_TRUE(s.error_code() == grpc::StatusCode::NOT_FOUND ||
                    s.error_code() == grpc::StatusCode::ALREADY_EXISTS)
            << s.error_message();
      }
      ASSERT_FALSE(killed && step > 5000) << "server did not die";
    }
    if (killer.joinable()) {
      killer.join();
    }
  }
  EXPECT_GE(kills, 20);
  EXPECT_GT(acknowledged, 50);
  EXPECT_GT(refused, 0);
  RecordProperty("kills", kills);
  RecordProperty("acknowledged", acknowledged);
  RecordProperty("in_doubt", in_doubt);
}

// Sixteen writers at once, each on its own group, while the server is
// SIGKILLed at a random moment: their writes share commits (group commit),
// and still every acknowledged write is there after the restart, and a
// write in flight at the kill is either wholly there or not at all.
TEST(AdminBinaryTest, ConcurrentAcknowledgedWritesSurviveSigkill) {
  constexpr int kWriters = 16;
  constexpr int kRounds = 16;
  TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  const std::string state = dir.path() + "/state";
  std::mt19937 rng(20261203);
  // Per writer: the port of its last acknowledged write (0: none yet), and
  // of a write whose answer the kill took (0: none).
  std::vector<int> acked(kWriters, 0), in_doubt(kWriters, 0);
  int acknowledged = 0;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_OK_AND_ASSIGN(
        RunningServer server,
        aside::testing::StartServer(
            state, {"--admin-token-file", tokens, "--metrics", ""}));
    auto channel = grpc::CreateChannel(server.target(),
                                       grpc::InsecureChannelCredentials());
    auto admin = v1::Admin::NewStub(channel);
    uint64_t generation = 0;
    const Model stored = ReadBack(*admin, &generation);
    for (int w = 0; w < kWriters; ++w) {
      const std::string name = absl::StrCat("c", w);
      auto it = stored.find(name);
      const int port = it == stored.end() || it->second.empty()
                           ? 0
                           : std::stoi(it->second.begin()->first.substr(
                                 it->second.begin()->first.find(':') + 1));
      if (acked[w] != 0 || in_doubt[w] != 0) {
        ASSERT_TRUE(port == acked[w] ||
                    (in_doubt[w] != 0 && port == in_doubt[w]))
            << name << " holds port " << port << " after round " << round
            << "; acknowledged " << acked[w] << ", in doubt " << in_doubt[w];
      }
      acked[w] = port;  // what is there is the base of this round
      in_doubt[w] = 0;
    }
    aside::Mutex mu;
    int round_acks = 0;         // guarded by mu
    bool writers_done = false;  // guarded by mu
    // Reads the server's stderr while the writers run, so that its log
    // lines never fill the pipe and stall it.
    std::thread drainer([&] {
      for (;;) {
        {
          aside::MutexLock lock(&mu);
          if (mu.AwaitWithTimeout(aside::Cond(&writers_done),
                                  absl::Milliseconds(50))) {
            return;
          }
        }
        server.process->ReadAvailable();
      }
    });
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        const std::string name = absl::StrCat("c", w);
        for (int step = 0; step < 100000; ++step) {
          const int port = 10000 + (round * 1000 + step) % 50000;
          v1::Group g;
          g.set_name(name);
          g.mutable_health_check()->set_kind(v1::HealthCheck::NONE);
          g.add_backends()->set_address(absl::StrCat("127.0.0.1:", port));
          v1::Group out;
          grpc::Status s;
          if (acked[w] == 0) {
            v1::CreateGroupRequest r;
            *r.mutable_group() = g;
            s = admin->CreateGroup(Context(kToken).get(), r, &out);
          } else {
            v1::UpdateGroupRequest r;
            *r.mutable_group() = g;
            r.mutable_update_mask()->add_paths("backends");
            s = admin->UpdateGroup(Context(kToken).get(), r, &out);
          }
          if (!s.ok()) {
            // Killed mid-call (or after): the next start shows whether it
            // was made. Nothing else may fail here.
            EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                        s.error_code() == grpc::StatusCode::CANCELLED ||
                        s.error_code() == grpc::StatusCode::INTERNAL ||
                        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
                << name << ": " << s.error_code() << " " << s.error_message();
            in_doubt[w] = port;
            return;
          }
          acked[w] = port;
          aside::MutexLock lock(&mu);
          ++round_acks;
        }
      });
    }
    // Kill once the writers are under way: after a random number of
    // acknowledged writes (an event to wait on, not a time).
    const int kill_after = 50 + static_cast<int>(rng() % 400);
    bool started = false;
    {
      aside::MutexLock lock(&mu);
      started = mu.AwaitWithTimeout(
          [&] {
            mu.AssertHeld();
            return round_acks >= kill_after;
          },
          absl::Seconds(60));
    }
    server.process->Signal(SIGKILL);
    for (std::thread& t : writers) {
      t.join();
    }
    {
      aside::MutexLock lock(&mu);
      writers_done = true;
    }
    drainer.join();
    ASSERT_TRUE(started) << "writers made no progress";
    server.process->Wait(absl::Seconds(30));
    ASSERT_EQ(IntegrityCheck(state + "/aside.db"), "ok");
    aside::MutexLock lock(&mu);
    acknowledged += round_acks;
  }
  // The last round's writes, read back once more.
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      aside::testing::StartServer(
          state, {"--admin-token-file", tokens, "--metrics", ""}));
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  uint64_t generation = 0;
  const Model stored = ReadBack(*admin, &generation);
  for (int w = 0; w < kWriters; ++w) {
    const std::string name = absl::StrCat("c", w);
    ASSERT_TRUE(stored.contains(name)) << name;
    const std::string& address = stored.at(name).begin()->first;
    const int port = std::stoi(address.substr(address.find(':') + 1));
    EXPECT_TRUE(port == acked[w] || (in_doubt[w] != 0 && port == in_doubt[w]))
        << name << " holds port " << port << "; acknowledged " << acked[w]
        << ", in doubt " << in_doubt[w];
  }
  RecordProperty("acknowledged", acknowledged);
}

// Certificates made with the openssl command line for one test.
class Pki {
 public:
  explicit Pki(const TempDir& dir) : dir_(dir.path()) {}

  bool Make() {
    return Run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                "-days", "2", "-subj", "/CN=aside-test-ca", "-keyout",
                path("ca.key"), "-out", path("ca.crt")}) &&
           Leaf("server", "/CN=localhost",
                "subjectAltName=DNS:localhost,IP:127.0.0.1") &&
           Leaf("admin", "/CN=deployer",
                "subjectAltName=URI:spiffe://test/ns/ops/sa/deployer") &&
           Leaf("other", "/CN=someone",
                "subjectAltName=URI:spiffe://test/other");
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Read(const std::string& name) const {
    std::ifstream in(path(name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  bool Run(std::vector<std::string> argv) {
    auto r = aside::testing::RunCommand(std::move(argv));
    if (r.exit_code != 0) {
      ADD_FAILURE() << r.output;
    }
    return r.exit_code == 0;
  }
  bool Leaf(const std::string& name, const std::string& subject,
            const std::string& san) {
    const std::string ext = path(name + ".ext");
    std::ofstream(ext) << san << "\n";
    return Run({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj",
                subject, "-keyout", path(name + ".key"), "-out",
                path(name + ".csr")}) &&
           Run({"openssl", "x509", "-req", "-in", path(name + ".csr"), "-CA",
                path("ca.crt"), "-CAkey", path("ca.key"), "-CAcreateserial",
                "-days", "2", "-extfile", ext, "-out", path(name + ".crt")});
  }

  std::string dir_;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Pki pki(dir_);
    ASSERT_TRUE(pki.Make());
    ca_ = pki.Read("ca.crt");
    admin_cert_ = pki.Read("admin.crt");
    admin_key_ = pki.Read("admin.key");
    other_cert_ = pki.Read("other.crt");
    other_key_ = pki.Read("other.key");
    dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    config_ = dir_.WriteFile(
        "aside.yaml",
        absl::StrCat("tls:\n  cert_file: ", pki.path("server.crt"),
                     "\n  key_file: ", pki.path("server.key"),
                     "\n  client_ca_file: ", pki.path("ca.crt"),
                     "\n  require_client_cert: true\n",
                     "admin:\n  token_file: ", dir_.path(), "/tokens\n",
                     "  allowed_identities:\n",
                     "    - {identity: \"spiffe://test/ns/ops/sa/deployer\", "
                     "role: admin}\n",
                     "groups:\n  - name: demo\n    health_check: {kind: none}\n"
                     "    backends: [127.0.0.1:9001]\n"));
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& cert,
                                         const std::string& key) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ca_;
    options.pem_cert_chain = cert;
    options.pem_private_key = key;
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return grpc::CreateCustomChannel(server_.target(),
                                     grpc::SslCredentials(options), args);
  }

  grpc::Status CreateGroup(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& name,
                           const std::string& token = "") {
    v1::CreateGroupRequest r;
    r.mutable_group()->set_name(name);
    v1::Group g;
    return v1::Admin::NewStub(channel)->CreateGroup(Context(token).get(), r,
                                                    &g);
  }

  TempDir dir_;
  std::string config_;
  std::string ca_, admin_cert_, admin_key_, other_cert_, other_key_;
  RunningServer server_;
};

TEST_F(TlsTest, MutualTlsIdentitiesTokensAndPlaintextRefusal) {
  ASSERT_OK_AND_ASSIGN(
      server_, aside::testing::StartServer(
                   dir_.path() + "/state",
                   {"--config", config_, "--health-listen", "127.0.0.1:0"}));
  // The allowed identity may administer without a token.
  grpc::Status s = CreateGroup(Channel(admin_cert_, admin_key_), "by-identity");
  EXPECT_TRUE(s.ok()) << s.error_message();
  // Another valid client certificate is not an admin identity...
  s = CreateGroup(Channel(other_cert_, other_key_), "by-other");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << s.error_message();
  // ...but may use a token, and may pick without one.
  s = CreateGroup(Channel(other_cert_, other_key_), "by-token", kToken);
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::PickRequest pick;
  pick.set_group("demo");
  v1::PickResponse picked;
  s = v1::LoadBalancer::NewStub(Channel(other_cert_, other_key_))
          ->Pick(Context().get(), pick, &picked);
  EXPECT_TRUE(s.ok()) << s.error_message();

  // No client certificate: the handshake fails.
  s = CreateGroup(Channel("", ""), "no-cert", kToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Plaintext: refused.
  auto plain =
      grpc::CreateChannel(server_.target(), grpc::InsecureChannelCredentials());
  s = v1::LoadBalancer::NewStub(plain)->Pick(Context().get(), pick, &picked);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);

  // The plaintext health port answers kubelet-style probes.
  ASSERT_GT(server_.health_port, 0);
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server_.health_port),
                          grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest hr;
  grpc::health::v1::HealthCheckResponse hresp;
  s = health->Check(Context().get(), hr, &hresp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // Only health is served there.
  s = v1::LoadBalancer::NewStub(
          grpc::CreateChannel(
              "127.0.0.1:" + std::to_string(server_.health_port),
              grpc::InsecureChannelCredentials()))
          ->Pick(Context().get(), pick, &picked);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace aside
