// The status page in a real browser: headless Chromium, driven over the
// DevTools protocol, opens / on the metrics port of the real aside-server
// binary, whose groups are probed against real HTTP health endpoints this
// test runs. The page must render every group and backend, refresh itself,
// and show a backend the test kills as unhealthy without a reload. With
// picks flowing (Pick RPCs) it must plot each backend's share of picks: a
// drained backend's line drops to 0 within two samples and the timeline
// shows the drain; a killed backend's health event appears with its time.
// Screenshots are left in <build>/artifacts/ (status-page.png,
// status-page-history.png; the latter is the one docs/ shows).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/health/test_backends.h"
#include "tests/integration/server_helpers.h"
#include "tests/status/devtools.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {
namespace {

using ::testing::HasSubstr;

// Probe every 500 ms; one failure makes a backend unhealthy.
constexpr absl::Duration kProbeInterval = absl::Milliseconds(500);
// The page fetches /status.json every 1.5 s.
constexpr absl::Duration kPageRefresh = absl::Milliseconds(1500);
// The server's history samples every second here (5 s by default).
constexpr absl::Duration kSample = absl::Seconds(1);
constexpr char kToken[] = "status-browser-test-admin-token";

class StatusBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& b : backends_) {
      b = std::make_unique<FakeBackend>(FakeBackend::Mode::kHttp);
      absl::StatusOr<uint16_t> port = b->Listen();
      ASSERT_OK(port);
      addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
    }
    const std::string check =
        "{kind: http, interval: 500ms, timeout: 300ms, rise: 1, fall: 1, "
        "jitter: 0}";
    const std::string tokens =
        dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    const std::string config =
        absl::StrCat("admin: {token_file: ", tokens,
                     "}\n"
                     "status_page: {history_interval: 1s}\n"
                     "groups:\n"
                     "  - name: checkout\n"
                     "    policy: weighted_round_robin\n"
                     "    health_check: ",
                     check,
                     "\n    backends:\n"
                     "      - {address: \"",
                     addresses_[0],
                     "\", weight: 300}\n"
                     "      - \"",
                     addresses_[1],
                     "\"\n"
                     "  - name: search\n"
                     "    policy: ketama\n"
                     "    health_check: ",
                     check, "\n    backends: [\"", addresses_[1], "\", \"",
                     addresses_[2], "\"]\n");
    auto server =
        StartServer(dir_.path() + "/state",
                    {"--config", dir_.WriteFile("aside.yaml", config)});
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_GT(server_.metrics_port, 0);
  }

  void TearDown() override { StopPicking(); }

  // Pick RPCs on `group`, one after another, until StopPicking.
  void StartPicking(const std::string& group) {
    auto stub = v1::LoadBalancer::NewStub(grpc::CreateChannel(
        server_.target(), grpc::InsecureChannelCredentials()));
    picker_ = std::thread([this, group, stub = std::move(stub)] {
      while (!stop_picking_.load()) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
        v1::PickRequest request;
        request.set_group(group);
        v1::PickResponse response;
        (void)stub->Pick(&context, request, &response);
        // Paced (about 1000 picks a second at most): enough for the
        // shares, without taking a core from the server.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void StopPicking() {
    stop_picking_ = true;
    if (picker_.joinable()) {
      picker_.join();
    }
  }

  std::unique_ptr<v1::Admin::Stub> Admin() const {
    return v1::Admin::NewStub(grpc::CreateChannel(
        server_.target(), grpc::InsecureChannelCredentials()));
  }

  // The last value the page drew for a backend's share line ("" when none).
  static std::string ShareLine(const std::string& group,
                               const std::string& address,
                               const std::string& series) {
    return absl::StrCat("(document.querySelector('.plots[data-group=\"", group,
                        "\"] path[data-series=\"", series,
                        "\"][data-address=\"", address,
                        "\"]') || {dataset: {}}).dataset.last");
  }

  std::string Url() const {
    return absl::StrCat("http://127.0.0.1:", server_.metrics_port, "/");
  }

  // The page's health cell for a backend of a group, as its row says.
  static std::string RowHealth(const std::string& group,
                               const std::string& address) {
    return absl::StrCat("(document.querySelector('tr[data-group=\"", group,
                        "\"][data-address=\"", address,
                        "\"]') || {dataset: {}}).dataset.health");
  }

  TempDir dir_;
  std::thread picker_;
  std::atomic<bool> stop_picking_{false};
  std::unique_ptr<FakeBackend> backends_[3];
  std::vector<std::string> addresses_;
  RunningServer server_;
};

TEST_F(StatusBrowserTest, PageShowsTheFleetAndFollowsAKilledBackend) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HeadlessBrowser> browser,
                       HeadlessBrowser::Open(Url()));
  // Rendered from /status.json, and refreshed by itself since.
  ASSERT_TRUE(browser->WaitFor(
      "Number(document.body.dataset.updates || 0) >= 2", absl::Seconds(20)))
      << browser->Evaluate("document.body.innerText").value_or("?");

  ASSERT_OK_AND_ASSIGN(
      std::string groups,
      browser->EvaluateString("[...document.querySelectorAll('section.group')]"
                              ".map(s => s.dataset.group).join(',')"));
  EXPECT_EQ(groups, "checkout,search");
  ASSERT_TRUE(browser->WaitFor(
      absl::StrCat(RowHealth("checkout", addresses_[0]), " === 'healthy' && ",
                   RowHealth("checkout", addresses_[1]), " === 'healthy' && ",
                   RowHealth("search", addresses_[1]), " === 'healthy' && ",
                   RowHealth("search", addresses_[2]), " === 'healthy'"),
      absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(std::string text,
                       browser->EvaluateString("document.body.innerText"));
  EXPECT_THAT(text, HasSubstr("weighted_round_robin"));
  EXPECT_THAT(text, HasSubstr("ketama"));
  EXPECT_THAT(text, HasSubstr("2/2 ready"));
  EXPECT_THAT(text, HasSubstr("store: sqlite"));
  EXPECT_THAT(text, HasSubstr("Health targets"));
  ASSERT_OK_AND_ASSIGN(
      std::string weight,
      browser->EvaluateString(absl::StrCat(
          "document.querySelector('tr[data-group=\"checkout\"][data-address=\"",
          addresses_[0], "\"] td.num').textContent")));
  EXPECT_EQ(weight, "300");

  // The artifact: the page as an operator sees it.
  ASSERT_OK_AND_ASSIGN(std::string png, browser->Screenshot());
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(0, 4), "\x89PNG");
  const std::filesystem::path artifacts =
      std::filesystem::path(BinDir()).parent_path() / "artifacts";
  std::filesystem::create_directories(artifacts);
  std::ofstream(artifacts / "status-page.png", std::ios::binary) << png;

  // Kill the backend both groups share: the open page turns it unhealthy
  // in both, by itself, within a probe (fall 1) plus a page refresh, with
  // slack for a loaded machine.
  backends_[1]->Stop();
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(browser->WaitFor(
      absl::StrCat(RowHealth("checkout", addresses_[1]), " === 'unhealthy' && ",
                   RowHealth("search", addresses_[1]), " === 'unhealthy'"),
      kProbeInterval + kPageRefresh + absl::Seconds(8)))
      << browser->Evaluate("document.body.innerText").value_or("?");
  const absl::Duration took = absl::Now() - killed;
  std::cout << "[ status-page ] killed backend unhealthy on the page after "
            << absl::FormatDuration(took) << "\n";
  EXPECT_EQ(browser->EvaluateString(RowHealth("checkout", addresses_[0]))
                .value_or("?"),
            "healthy");
  ASSERT_OK_AND_ASSIGN(text,
                       browser->EvaluateString("document.body.innerText"));
  EXPECT_THAT(text, HasSubstr("1/2 ready"));
  // The probe's reason: refused, or a timeout for a probe caught mid-way.
  EXPECT_THAT(text, HasSubstr("failed: "));
}

TEST_F(StatusBrowserTest, PlotsShowADrainAndAKilledBackendOnTheTimeline) {
  // A group of the Admin API (file groups cannot be drained there).
  {
    v1::CreateGroupRequest r;
    v1::Group* g = r.mutable_group();
    g->set_name("payments");
    g->mutable_policy()->mutable_weighted_round_robin();
    for (int i : {0, 2}) {
      v1::Backend* b = g->add_backends();
      b->set_address(addresses_[i]);
      b->set_weight(i == 0 ? 100 : 300);
    }
    v1::HealthCheck* check = g->mutable_health_check();
    check->set_kind(v1::HealthCheck::HTTP);
    check->mutable_interval()->set_nanos(500'000'000);
    check->mutable_timeout()->set_nanos(300'000'000);
    check->set_rise(1);
    check->set_fall(1);
    check->set_jitter(0);
    v1::Group created;
    grpc::Status s = Admin()->CreateGroup(Context(kToken).get(), r, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  StartPicking("payments");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HeadlessBrowser> browser,
                       HeadlessBrowser::Open(Url(), 1280, 1100));
  const std::string drained = addresses_[2];
  // Both backends take their share: about 1/4 and 3/4 of the picks, the
  // shares their weights ask for.
  ASSERT_TRUE(browser->WaitFor(
      absl::StrCat("Number(", ShareLine("payments", drained, "pick_share"),
                   ") > 0.5 && Number(",
                   ShareLine("payments", addresses_[0], "pick_share"),
                   ") > 0.1"),
      absl::Seconds(20)))
      << browser->Evaluate("JSON.stringify(history)").value_or("?");
  EXPECT_EQ(
      browser->EvaluateString(ShareLine("payments", drained, "weight_share"))
          .value_or("?"),
      "0.75");
  // Cells never measured say so: no load reports yet.
  ASSERT_OK_AND_ASSIGN(
      std::string dash,
      browser->EvaluateString(absl::StrCat(
          "document.querySelector('tr[data-group=\"payments\"][data-address=\"",
          drained, "\"] span.nm').title")));
  EXPECT_THAT(dash, HasSubstr("no load reports"));

  const absl::Time before_drain = absl::Now();
  {
    v1::DrainBackendsRequest r;
    r.set_group("payments");
    r.add_addresses(drained);
    r.set_drained(true);
    v1::Group g;
    grpc::Status s = Admin()->DrainBackends(Context(kToken).get(), r, &g);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const absl::Time after_drain = absl::Now();
  // The page draws the line at 0, and the second sample after the drain
  // (the first whole interval after it) is 0 in the data it drew.
  const std::string second_after = absl::StrCat(
      "(() => { const g = history.groups.find(g => g.name === 'payments');"
      "  const b = g.backends.find(b => b.address === '",
      drained,
      "');"
      "  const i = history.times_unix_ms.findIndex(t => t > ",
      absl::ToUnixMillis(after_drain),
      ");"
      "  return i < 0 || i + 1 >= b.pick_share.length ? null :"
      "      b.pick_share[i + 1]; })()");
  ASSERT_TRUE(browser->WaitFor(
      absl::StrCat(ShareLine("payments", drained, "pick_share"), " === '0' && ",
                   second_after, " !== null"),
      2 * kSample + kPageRefresh + absl::Seconds(8)))
      << browser->Evaluate("JSON.stringify(history)").value_or("?");
  EXPECT_EQ(browser->Evaluate(second_after).value_or("?"), "0");
  EXPECT_EQ(
      browser->EvaluateString(ShareLine("payments", drained, "weight_share"))
          .value_or("?"),
      "0");
  EXPECT_EQ(
      browser
          ->EvaluateString(ShareLine("payments", addresses_[0], "pick_share"))
          .value_or("?"),
      "1");
  // The timeline shows the drain, at its time.
  const std::string drain_row = absl::StrCat(
      "document.querySelector('#events tr[data-kind=\"drained\"]"
      "[data-group=\"payments\"][data-backend=\"",
      drained, "\"]')");
  ASSERT_TRUE(browser->WaitFor(drain_row + " !== null", absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(std::string drain_time,
                       browser->EvaluateString(drain_row + ".dataset.time"));
  EXPECT_GE(std::stoll(drain_time),
            absl::ToUnixMillis(before_drain - absl::Milliseconds(50)));
  EXPECT_LE(std::stoll(drain_time),
            absl::ToUnixMillis(after_drain + absl::Milliseconds(50)));

  // Kill the payments backend still serving: its health event appears,
  // with the time it was noticed.
  const absl::Time killed = absl::Now();
  backends_[0]->Stop();
  const std::string health_row = absl::StrCat(
      "document.querySelector('#events tr[data-kind=\"health\"]"
      "[data-group=\"payments\"][data-backend=\"",
      addresses_[0], "\"]')");
  ASSERT_TRUE(
      browser->WaitFor(health_row + " !== null",
                       kProbeInterval + kPageRefresh + absl::Seconds(8)))
      << browser->Evaluate("document.querySelector('#events').innerText")
             .value_or("?");
  ASSERT_OK_AND_ASSIGN(std::string health_time,
                       browser->EvaluateString(health_row + ".dataset.time"));
  EXPECT_GE(std::stoll(health_time), absl::ToUnixMillis(killed));
  EXPECT_LE(std::stoll(health_time), absl::ToUnixMillis(absl::Now()));
  ASSERT_OK_AND_ASSIGN(std::string cause,
                       browser->EvaluateString(health_row + ".innerText"));
  EXPECT_THAT(cause, HasSubstr("healthy -> unhealthy"));

  // Filtered by group, the timeline shows that group's events and those
  // of no group only.
  ASSERT_OK_AND_ASSIGN(
      std::string others,
      browser->Evaluate(
          "(() => { const s = document.getElementById('events-filter');"
          "  s.value = 'payments'; s.dispatchEvent(new Event('change'));"
          "  return [...document.querySelectorAll('#events tbody tr')]"
          "      .filter(r => r.dataset.group && "
          "                   r.dataset.group !== 'payments').length; })()"));
  EXPECT_EQ(others, "0");

  // A few more samples, so the plots show the drain and the failure with
  // history on both sides, then the artifact (and the docs' screenshot).
  const std::string samples = "(history ? history.times_unix_ms.length : 0)";
  ASSERT_OK_AND_ASSIGN(std::string now_samples, browser->Evaluate(samples));
  ASSERT_TRUE(browser->WaitFor(
      absl::StrCat(samples, " >= ", std::stoi(now_samples) + 4),
      absl::Seconds(15)));
  ASSERT_OK_AND_ASSIGN(std::string png, browser->Screenshot());
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(0, 4), "\x89PNG");
  const std::filesystem::path artifacts =
      std::filesystem::path(BinDir()).parent_path() / "artifacts";
  std::filesystem::create_directories(artifacts);
  std::ofstream(artifacts / "status-page-history.png", std::ios::binary) << png;
}

}  // namespace
}  // namespace aside::testing
