// /status.json and / on the metrics port of an in-process server, against
// real HTTP health endpoints on loopback: what the snapshot says about
// groups, backends, shared targets, picks, Watch subscribers and the store;
// a killed backend turning unhealthy; the history and events following
// picks and a drain; the token and the off switch.
#include "server/status/status_page.h"

#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/server.h"
#include "tests/health/test_backends.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::FakeBackend;
using ::aside::testing::HttpGet;
using ::aside::testing::TempDir;
using ::google::protobuf::ListValue;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "status-page-test-token-0123456789";
constexpr char kSvgNamespace[] = "http://www.w3.org/2000/svg";

// A google.protobuf.Struct filled inside Debian's libprotobuf (built without
// sanitizers) faults when code built with -fsanitize=thread reads its map
// (a lookup or a plain iteration; a ten-line program reproduces it), so
// the tests that read the snapshot as a Struct do not run under TSan. The
// server side of the page still does, in the other tests here.
#if defined(__SANITIZE_THREAD__)
#define SKIP_STRUCT_READS_UNDER_TSAN() \
  GTEST_SKIP() << "protobuf Map from an uninstrumented libprotobuf"
#else
#define SKIP_STRUCT_READS_UNDER_TSAN() \
  do {                                 \
  } while (false)
#endif

// The first element of `list` whose `key` is `value` (null if none).
const Struct* FindBy(const ListValue& list, const std::string& key,
                     const std::string& value) {
  for (const Value& v : list.values()) {
    const auto& fields = v.struct_value().fields();
    auto it = fields.find(key);
    if (it != fields.end() && it->second.string_value() == value) {
      return &v.struct_value();
    }
  }
  return nullptr;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value kNull;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kNull : it->second;
}

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& b : backends_) {
      b = std::make_unique<FakeBackend>(FakeBackend::Mode::kHttp);
      absl::StatusOr<uint16_t> port = b->Listen();
      ASSERT_OK(port);
      addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
    }
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
    }
  }

  // Starts a server with two groups sharing the first backend's target;
  // `extra` is appended to the config.
  void StartServer(const std::string& extra = "") {
    const std::string check =
        "{kind: http, interval: 200ms, timeout: 150ms, rise: 1, fall: 1, "
        "jitter: 0}";
    const std::string text =
        absl::StrCat("state_dir: ", dir_.path(),
                     "\nlisten: 127.0.0.1:0\nmetrics: 127.0.0.1:0\n", extra,
                     "groups:\n"
                     "  - name: web\n"
                     "    policy: round_robin\n"
                     "    health_check: ",
                     check,
                     "\n"
                     "    backends:\n"
                     "      - {address: \"",
                     addresses_[0],
                     "\", weight: 300}\n"
                     "      - \"",
                     addresses_[1],
                     "\"\n"
                     "  - name: shared\n"
                     "    policy: hash\n"
                     "    health_check: ",
                     check,
                     "\n"
                     "    backends: [\"",
                     addresses_[0], "\"]\n");
    absl::StatusOr<ServerConfig> config = ParseConfig(text, "status.yaml");
    ASSERT_OK(config);
    absl::StatusOr<std::unique_ptr<AsideServer>> server =
        AsideServer::Create(*std::move(config));
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
  }

  absl::StatusOr<testing::HttpResponse> Get(
      const std::string& path,
      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    return HttpGet("127.0.0.1", server_->metrics_port(), path,
                   absl::Seconds(10), headers);
  }

  // Fetches /status.json until `done` holds for it (bounded); returns the
  // last snapshot either way.
  Struct AwaitSnapshot(const std::function<bool(const Struct&)>& done,
                       absl::Duration timeout = absl::Seconds(15)) {
    const absl::Time deadline = absl::Now() + timeout;
    Struct last;
    std::string last_body;
    while (true) {
      absl::StatusOr<testing::HttpResponse> r = Get("/status.json");
      last_body = r.ok() ? r->body : r.status().ToString();
      if (r.ok() && r->status == 200) {
        Struct s;
        EXPECT_TRUE(
            google::protobuf::util::JsonStringToMessage(r->body, &s).ok())
            << r->body;
        last = s;
        if (done(s)) {
          return s;
        }
      }
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "condition not reached; last snapshot: " << last_body;
        return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  static const Struct* Group(const Struct& s, const std::string& name) {
    return FindBy(Field(s, "groups").list_value(), "name", name);
  }
  static const Struct* Backend(const Struct& s, const std::string& group,
                               const std::string& address) {
    const Struct* g = Group(s, group);
    return g == nullptr
               ? nullptr
               : FindBy(Field(*g, "backends").list_value(), "address", address);
  }
  std::function<bool(const Struct&)> HealthIs(const std::string& address,
                                              const std::string& state) {
    return [address, state](const Struct& s) {
      const Struct* b = Backend(s, "web", address);
      return b != nullptr && Field(*b, "health").string_value() == state;
    };
  }

  TempDir dir_;
  std::unique_ptr<FakeBackend> backends_[2];
  std::vector<std::string> addresses_;
  std::unique_ptr<AsideServer> server_;
};

TEST_F(StatusPageTest, SnapshotShowsGroupsBackendsTargetsAndStore) {
  SKIP_STRUCT_READS_UNDER_TSAN();
  StartServer();
  const Struct s = AwaitSnapshot([&](const Struct& s) {
    return HealthIs(addresses_[0], "healthy")(s) &&
           HealthIs(addresses_[1], "healthy")(s);
  });
  const Struct* web = Group(s, "web");
  ASSERT_NE(web, nullptr);
  EXPECT_EQ(Field(*web, "policy").string_value(), "round_robin");
  EXPECT_EQ(Field(*web, "source").string_value(), "file");
  EXPECT_EQ(Field(*web, "ready").number_value(), 2);
  EXPECT_EQ(Field(*web, "total").number_value(), 2);
  EXPECT_FALSE(Field(*web, "panic").bool_value());
  EXPECT_EQ(Field(*web, "generation").number_value(),
            static_cast<double>(
                server_->groups().Find("web")->table()->generation()));

  const Struct* a = Backend(s, "web", addresses_[0]);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Field(*a, "weight").number_value(), 300);
  EXPECT_EQ(Field(*a, "effective_weight").number_value(), 300);
  EXPECT_TRUE(Field(*a, "ready").bool_value());
  EXPECT_FALSE(Field(*a, "drained").bool_value());
  EXPECT_TRUE(Field(*a, "outlier").has_null_value());
  const Struct& probe = Field(*a, "probe").struct_value();
  EXPECT_EQ(Field(probe, "kind").string_value(), "http");
  EXPECT_TRUE(Field(probe, "success").bool_value());
  EXPECT_GT(Field(probe, "latency_ms").number_value(), 0);
  const Struct& load = Field(*a, "load").struct_value();
  EXPECT_EQ(Field(load, "in_flight").number_value(), 0);
  EXPECT_EQ(Field(load, "requests_per_second").number_value(), 0);
  EXPECT_TRUE(Field(load, "latency_ewma_ms").has_number_value());

  // One target per address, shared by both groups.
  const Struct* target =
      FindBy(Field(s, "targets").list_value(), "address", addresses_[0]);
  ASSERT_NE(target, nullptr);
  const ListValue& groups = Field(*target, "groups").list_value();
  ASSERT_EQ(groups.values_size(), 2);
  EXPECT_EQ(groups.values(0).string_value(), "shared");
  EXPECT_EQ(groups.values(1).string_value(), "web");
  EXPECT_EQ(Field(s, "targets").list_value().values_size(), 2);

  const Struct& totals = Field(s, "totals").struct_value();
  EXPECT_EQ(Field(totals, "groups").number_value(), 2);
  EXPECT_EQ(Field(totals, "backends").number_value(), 3);
  EXPECT_EQ(Field(totals, "ready").number_value(), 3);
  const Struct& store = Field(s, "store").struct_value();
  EXPECT_EQ(Field(store, "type").string_value(), "sqlite");
  EXPECT_THAT(Field(store, "location").string_value(), HasSubstr(dir_.path()));
}

TEST_F(StatusPageTest, KilledBackendTurnsUnhealthyWithTheProbeReason) {
  SKIP_STRUCT_READS_UNDER_TSAN();
  StartServer();
  AwaitSnapshot(HealthIs(addresses_[1], "healthy"));
  backends_[1]->Stop();
  const Struct s = AwaitSnapshot(HealthIs(addresses_[1], "unhealthy"));
  const Struct* b = Backend(s, "web", addresses_[1]);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(Field(*b, "ready").bool_value());
  const Struct& probe = Field(*b, "probe").struct_value();
  EXPECT_FALSE(Field(probe, "success").bool_value());
  // Refused, or a timeout for a probe caught mid-way by the kill.
  EXPECT_THAT(Field(probe, "reason").string_value(),
              ::testing::AnyOf(HasSubstr("connect"), HasSubstr("timeout")));
  EXPECT_EQ(Field(*Group(s, "web"), "ready").number_value(), 1);
  // The other group sharing nothing with it is untouched.
  EXPECT_EQ(Field(*Group(s, "shared"), "ready").number_value(), 1);
}

TEST_F(StatusPageTest, CountsPicksAndWatchSubscribers) {
  SKIP_STRUCT_READS_UNDER_TSAN();
  StartServer();
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                          grpc::InsecureChannelCredentials());
  auto stub = v1::LoadBalancer::NewStub(channel);
  grpc::ClientContext watch_context;
  v1::WatchRequest watch;
  watch.add_groups("shared");
  auto reader = stub->Watch(&watch_context, watch);
  v1::GroupUpdate update;
  ASSERT_TRUE(reader->Read(&update));

  // Picks keep flowing while the page samples its counters.
  std::atomic<bool> stop{false};
  std::thread picker([&] {
    while (!stop.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
      v1::PickRequest request;
      request.set_group("web");
      v1::PickResponse response;
      (void)stub->Pick(&context, request, &response);
    }
  });
  const Struct s = AwaitSnapshot([&](const Struct& s) {
    const Struct* web = Group(s, "web");
    const Struct* shared = Group(s, "shared");
    const Struct* a = Backend(s, "web", addresses_[0]);
    return web != nullptr && shared != nullptr && a != nullptr &&
           Field(*web, "picks_per_second").number_value() > 0 &&
           Field(Field(*a, "load").struct_value(), "picks_per_second")
                   .number_value() > 0 &&
           Field(*shared, "watch_subscribers").number_value() == 1;
  });
  stop = true;
  picker.join();
  EXPECT_EQ(Field(*Group(s, "web"), "watch_subscribers").number_value(), 0);
  EXPECT_EQ(Field(Field(s, "totals").struct_value(), "watch_subscribers")
                .number_value(),
            1);
  watch_context.TryCancel();
  (void)reader->Finish();
}

TEST_F(StatusPageTest, PageIsSelfContainedAndPointsAtItsData) {
  StartServer();
  absl::StatusOr<testing::HttpResponse> r = Get("/");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->content_type, HasSubstr("text/html"));
  EXPECT_THAT(r->body, HasSubstr("status.json"));
  // Nothing is loaded from anywhere else (the SVG namespace, a name the
  // plots are created in, is the one URL the page spells).
  std::string body = r->body;
  for (size_t at; (at = body.find(kSvgNamespace)) != std::string::npos;) {
    body.erase(at, sizeof(kSvgNamespace) - 1);
  }
  EXPECT_THAT(body, Not(HasSubstr("http://")));
  EXPECT_THAT(body, Not(HasSubstr("https://")));
  EXPECT_THAT(body, Not(HasSubstr("src=")));
  EXPECT_THAT(r->body, HasSubstr("status/history.json"));
  EXPECT_THAT(r->body, HasSubstr("status/events.json"));
  EXPECT_EQ(r->body, std::string(StatusPage::Html()));
  r = Get("/status.json");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "application/json");
  r = Get("/metrics");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(StatusPageTest, TokenGuardsTheDataNotThePage) {
  const std::string tokens = dir_.WriteSecret(
      "tokens", absl::StrCat(kToken, " read\n",
                             "self-drain-token-0123456789 self-drain\n"));
  StartServer(absl::StrCat("admin: {token_file: ", tokens,
                           "}\nstatus_page: {require_token: true}\n"));
  absl::StatusOr<testing::HttpResponse> r = Get("/status.json");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_THAT(r->body, HasSubstr("Authorization: Bearer"));
  r = Get("/status.json", {{"Authorization", "Bearer not-a-token-we-know"}});
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_THAT(r->body, HasSubstr("unknown token"));
  // Every backend may hold a self-drain token: it reads nothing.
  r = Get("/status.json",
          {{"Authorization", "Bearer self-drain-token-0123456789"}});
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_THAT(r->body, HasSubstr("self-drain"));
  r = Get("/status.json", {{"Authorization", absl::StrCat("Bearer ", kToken)}});
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("\"require_token\":true"));
  // The history and the events beside it: the same rule.
  for (const char* path : {"/status/history.json", "/status/events.json"}) {
    r = Get(path);
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 401) << path;
    r = Get(path, {{"Authorization", absl::StrCat("Bearer ", kToken)}});
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->content_type, "application/json");
  }
  r = Get("/");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(StatusPageTest, HistoryAndEventsFollowPicksAndADrain) {
  StartServer();
  StatusHistory* history = server_->history();
  ASSERT_NE(history, nullptr);
  auto stub = v1::LoadBalancer::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  std::atomic<bool> stop{false};
  std::thread picker([&] {
    while (!stop.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
      v1::PickRequest request;
      request.set_group("web");
      v1::PickResponse response;
      (void)stub->Pick(&context, request, &response);
    }
  });
  GroupPtr web = server_->groups().Find("web");
  ASSERT_NE(web, nullptr);
  auto picks = [&] {
    return static_cast<uint64_t>(web->metrics()->picks_ok->Value());
  };
  // Samples once more picks have been answered (bounded).
  auto sample_after_picks = [&] {
    const uint64_t before = picks();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (picks() < before + 20 && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    history->Sample();
  };
  history->Sample();
  sample_after_picks();
  std::optional<GroupHistory> h = history->Read("web");
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->backends.size(), 2u);
  const size_t drained_index = h->backends[0].address == addresses_[1] ? 0 : 1;
  EXPECT_GT(h->picks_per_second.back(), 0);
  EXPECT_GT(h->backends[drained_index].pick_share.back(), 0);

  GroupSpec spec = web->spec();
  for (aside::Backend& b : spec.backends) {
    b.drained = b.address == addresses_[1];
  }
  ASSERT_OK(server_->groups().Update(web, spec));
  ASSERT_TRUE(server_->publisher().AwaitIdle(absl::Seconds(10)));
  sample_after_picks();
  sample_after_picks();
  stop = true;
  picker.join();
  h = history->Read("web");
  ASSERT_TRUE(h.has_value());
  // Within two samples of the drain its share of picks is 0, and so is
  // the share its weight asks for.
  EXPECT_EQ(h->backends[drained_index].pick_share.back(), 0);
  EXPECT_EQ(h->backends[drained_index].weight_share.back(), 0);
  EXPECT_EQ(h->backends[drained_index].drained.back(), true);
  EXPECT_NEAR(h->backends[1 - drained_index].pick_share.back(), 1, 1e-3);

  absl::StatusOr<testing::HttpResponse> r =
      Get("/status/events.json?group=web");
  ASSERT_OK(r);
  EXPECT_THAT(r->body, HasSubstr(absl::StrCat("\"kind\":\"drained\",\"group\":"
                                              "\"web\",\"backend\":\"",
                                              addresses_[1], "\"")));
  EXPECT_THAT(r->body, HasSubstr("\"kind\":\"generation\""));
  EXPECT_THAT(r->body, Not(HasSubstr("\"group\":\"shared\"")));
  r = Get("/status/history.json?group=web");
  ASSERT_OK(r);
  EXPECT_THAT(r->body, HasSubstr("\"name\":\"web\""));
  EXPECT_THAT(r->body, HasSubstr(addresses_[1]));
  EXPECT_THAT(r->body, Not(HasSubstr("\"name\":\"shared\"")));
  r = Get("/status/history.json?backends=0");
  ASSERT_OK(r);
  EXPECT_THAT(r->body, HasSubstr("\"name\":\"shared\""));
  EXPECT_THAT(r->body, Not(HasSubstr("pick_share")));
}

TEST_F(StatusPageTest, TurnedOffLeavesOnlyMetrics) {
  StartServer("status_page: {enabled: false}\n");
  EXPECT_EQ(server_->status_page(), nullptr);
  EXPECT_EQ(server_->history(), nullptr);
  EXPECT_EQ(server_->events(), nullptr);
  for (const char* path :
       {"/", "/status.json", "/status/history.json", "/status/events.json"}) {
    absl::StatusOr<testing::HttpResponse> r = Get(path);
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 404) << path;
  }
  absl::StatusOr<testing::HttpResponse> r = Get("/metrics");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
}

TEST(StatusPageConfigTest, RequireTokenNeedsATokenFile) {
  absl::StatusOr<ServerConfig> c =
      ParseConfig("status_page: {require_token: true}\n", "s.yaml");
  EXPECT_THAT(c.status().message(),
              HasSubstr("s.yaml:1:14: status_page.require_token: needs "
                        "admin.token_file"));
  c = ParseConfig("status_page: {enabled: nope}\n", "s.yaml");
  EXPECT_THAT(c.status().message(), HasSubstr("status_page.enabled"));
  c = ParseConfig("status_page: {colour: red}\n", "s.yaml");
  EXPECT_THAT(c.status().message(), HasSubstr("colour"));
  c = ParseConfig("status_page: {enabled: false}\n", "s.yaml");
  ASSERT_OK(c);
  EXPECT_FALSE(c->status_page_enabled);
}

}  // namespace
}  // namespace aside::server
