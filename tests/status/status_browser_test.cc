// The status page in a real browser: headless Chromium, driven over the
// DevTools protocol, opens / on the metrics port of the real aside-server
// binary, whose groups are probed against real HTTP health endpoints this
// test runs. The page must render every group and backend, refresh itself,
// and show a backend the test kills as unhealthy without a reload. A
// screenshot is left in <build>/artifacts/status-page.png.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
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
    const std::string config = absl::StrCat(
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
        check, "\n    backends: [\"", addresses_[1], "\", \"", addresses_[2],
        "\"]\n");
    auto server =
        StartServer(dir_.path() + "/state",
                    {"--config", dir_.WriteFile("aside.yaml", config)});
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_GT(server_.metrics_port, 0);
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

}  // namespace
}  // namespace aside::testing
