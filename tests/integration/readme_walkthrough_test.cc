// The README, followed as a newcomer would: the server started the way
// `make run` starts it (the Makefile's own command line: examples/aside.yaml,
// a state directory, a demo token file), then every `$` command of the
// README's sessions run against it and checked against the output printed
// under it. The commands come from README.md itself, so the two cannot drift
// apart: a command this test does not know fails it.
//
// grpcurl is not a Debian package; its calls go through ReflectionClient,
// which resolves services by server reflection exactly as grpcurl does.
// The server listens on free loopback ports instead of 50051/9464, so
// `localhost:50051` and `localhost:9464` stand for those ports and asidectl
// gets ASIDE_SERVER.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/integration/readme_session.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/reflection_client.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::RunningServer;
using ::aside::testing::SessionStep;
using ::aside::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The README's address of `make run`'s gRPC and metrics ports.
constexpr char kGrpcAddress[] = "localhost:50051";
constexpr char kMetricsHost[] = "localhost:9464";

// Setup lines of the Admin section that the fixture performs itself (a
// token file, a server reading it, $TOKEN). Listed verbatim: if the README
// changes them, this test fails and the list is reviewed with it.
const std::set<std::string>& FixtureSetup() {
  static const auto* setup = new std::set<std::string>{
      "echo \"$(openssl rand -hex 24) admin\" > tokens && chmod 600 tokens",
      "aside-server --admin-token-file tokens &",
      "TOKEN=$(cut -d' ' -f1 tokens)",
  };
  return *setup;
}

// Commands that run until interrupted, or read a file only the reader has.
bool Interactive(const std::string& command) {
  return absl::StrContains(command, "--watch") ||
         absl::StrContains(command, "asidectl watch ") ||
         absl::StrContains(command, "create-group groups.yaml") ||
         absl::StrContains(command, "apply-changes changes.yaml");
}

// Collapsed whitespace, generations (10+ digits) as <gen>.
std::string Normalize(const std::string& line) {
  static const std::regex generation("[0-9]{10,}");
  std::string s = std::regex_replace(line, generation, "<gen>");
  return absl::StrJoin(absl::StrSplit(s, ' ', absl::SkipEmpty()), " ");
}

// "key": value pairs of a JSON text, in order, nested ones included.
std::vector<std::pair<std::string, std::string>> JsonPairs(
    const std::string& text) {
  static const std::regex pair(
      R"re("([A-Za-z_]+)"\s*:\s*("(?:[^"\\]|\\.)*"|[-0-9.eE+]+|true|false|null)?)re");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pair);
       it != std::sregex_iterator(); ++it) {
    pairs.emplace_back((*it)[1].str(), (*it)[2].str());
  }
  return pairs;
}

class ReadmeWalkthroughTest : public ::testing::Test {
 protected:
  void SetUp() override {
    readme_ = ReadAll(aside::testing::SourceDir() + "/README.md");
    ASSERT_FALSE(readme_.empty());
    var_ = dir_.path() + "/var";
    // What `make run` writes once, mode 0600: "<48 hex digits> admin".
    std::random_device random;
    std::string hex;
    for (int i = 0; i < 24; ++i) {
      absl::StrAppend(&hex, absl::Hex(random() % 256, absl::kZeroPad2));
    }
    token_ = hex;
    std::filesystem::create_directories(var_);
    std::ofstream(var_ + "/demo-admin-token") << token_ << " admin\n";
    std::filesystem::permissions(var_ + "/demo-admin-token",
                                 std::filesystem::perms::owner_read |
                                     std::filesystem::perms::owner_write);
    ASSERT_NO_FATAL_FAILURE(StartAsMakeRun());
    vars_["TOKEN"] = token_;
    grpcurl_ =
        std::make_unique<aside::testing::ReflectionClient>(grpc::CreateChannel(
            server_.target(), grpc::InsecureChannelCredentials()));
  }

  // The Makefile's `run` recipe: its aside-server line, with the paths it
  // names moved into the test's directory.
  void StartAsMakeRun() {
    const std::string makefile =
        ReadAll(aside::testing::SourceDir() + "/Makefile");
    ASSERT_THAT(makefile,
                ::testing::HasSubstr("DEMO_TOKEN = var/demo-admin-token"));
    const size_t at = makefile.find("$(BUILD_DIR)/bin/aside-server");
    ASSERT_NE(at, std::string::npos) << "no aside-server line in the Makefile";
    std::string line;
    for (absl::string_view l :
         absl::StrSplit(absl::string_view(makefile).substr(at), '\n')) {
      absl::string_view text = absl::StripAsciiWhitespace(l);
      const bool more = absl::ConsumeSuffix(&text, "\\");
      absl::StrAppend(&line, text, " ");
      if (!more) {
        break;
      }
    }
    std::vector<std::string> args;
    for (absl::string_view word :
         absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (word == "$(BUILD_DIR)/bin/aside-server") {
        continue;
      }
      if (word == "$(DEMO_TOKEN)") {
        args.push_back(var_ + "/demo-admin-token");
      } else if (word == "var") {
        args.push_back(var_);
      } else if (absl::StartsWith(word, "examples/")) {
        args.push_back(absl::StrCat(aside::testing::SourceDir(), "/", word));
      } else {
        ASSERT_FALSE(absl::StartsWith(word, "$(")) << "unknown: " << word;
        args.emplace_back(word);
      }
    }
    run_args_ = args;
    // StartServer's own --listen/--metrics pick free ports; the Makefile's
    // flags come after them.
    ASSERT_OK_AND_ASSIGN(server_, aside::testing::StartServer(var_, args));
  }

  // Runs every step of the section under `heading`; returns how many ran.
  int RunSection(const std::string& heading) {
    const std::vector<SessionStep> steps =
        aside::testing::SessionSteps(readme_, heading);
    EXPECT_FALSE(steps.empty()) << "no commands under " << heading;
    int ran = 0;
    for (const SessionStep& step : steps) {
      SCOPED_TRACE(absl::StrCat("README.md:", step.line, ": $ ", step.command));
      if (FixtureSetup().count(step.command) > 0 || Interactive(step.command)) {
        continue;
      }
      RunStep(step);
      ++ran;
      if (::testing::Test::HasFatalFailure()) {
        break;
      }
    }
    return ran;
  }

  void RunStep(const SessionStep& step) {
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> words,
                         aside::testing::ShellWords(step.command, vars_));
    ASSERT_FALSE(words.empty());
    for (std::string& w : words) {
      if (absl::StartsWith(w, "var/")) {
        w = absl::StrCat(dir_.path(), "/", w);
      }
    }
    const std::string& tool = words[0];
    if (tool == "export") {
      ASSERT_EQ(words.size(), 2u);
      std::pair<std::string, std::string> kv =
          absl::StrSplit(words[1], absl::MaxSplits('=', 1));
      if (absl::StartsWith(kv.second, "var/")) {
        kv.second = absl::StrCat(dir_.path(), "/", kv.second);
      }
      env_[kv.first] = kv.second;
    } else if (tool == "grpcurl") {
      Grpcurl(words, step.output);
    } else if (tool == "curl") {
      Curl(words);
    } else if (tool == "asidectl" || tool == "build/bin/asidectl") {
      Asidectl(words, step.output);
    } else {
      FAIL() << "a README command this walk-through does not know: teach "
                "it to the test, or list it as fixture setup";
    }
  }

  void Grpcurl(const std::vector<std::string>& words,
               const std::vector<std::string>& expected) {
    std::string data = "{}";
    std::multimap<std::string, std::string> headers;
    std::vector<std::string> positional;
    bool plaintext = false;
    for (size_t i = 1; i < words.size(); ++i) {
      if (words[i] == "-plaintext") {
        plaintext = true;
      } else if (words[i] == "-d" && i + 1 < words.size()) {
        data = words[++i];
      } else if (words[i] == "-H" && i + 1 < words.size()) {
        std::pair<std::string, std::string> kv =
            absl::StrSplit(words[++i], absl::MaxSplits(':', 1));
        headers.emplace(absl::AsciiStrToLower(kv.first),
                        std::string(absl::StripAsciiWhitespace(kv.second)));
      } else {
        ASSERT_FALSE(absl::StartsWith(words[i], "-"))
            << "grpcurl flag not modelled: " << words[i];
        positional.push_back(words[i]);
      }
    }
    ASSERT_TRUE(plaintext) << "make run serves plaintext";
    ASSERT_GE(positional.size(), 2u);
    ASSERT_EQ(positional[0], kGrpcAddress);
    if (positional[1] == "list") {
      ASSERT_OK_AND_ASSIGN(std::vector<std::string> services,
                           grpcurl_->ListServices());
      std::vector<std::string> want = expected;
      std::sort(want.begin(), want.end());
      std::sort(services.begin(), services.end());
      EXPECT_EQ(services, want);
      return;
    }
    if (positional[1] == "describe") {
      ASSERT_EQ(positional.size(), 3u);
      if (!grpcurl_->DescribeMessage(positional[2]).ok()) {
        EXPECT_OK(grpcurl_->DescribeService(positional[2]).status());
      }
      return;
    }
    std::pair<std::string, std::string> method =
        absl::StrSplit(positional[1], absl::MaxSplits('/', 1));
    ASSERT_OK_AND_ASSIGN(
        std::string response,
        grpcurl_->CallJson(method.first, method.second, data, headers));
    if (expected.empty()) {
      return;
    }
    // The same fields; the same values but where the demo's answer varies
    // from run to run (the generation, which backend round_robin is at).
    auto want = JsonPairs(absl::StrJoin(expected, "\n"));
    auto got = JsonPairs(response);
    for (auto* pairs : {&want, &got}) {
      for (auto& [key, value] : *pairs) {
        if (key == "generation" || key == "address") {
          value = "<varies>";
        }
      }
      std::sort(pairs->begin(), pairs->end());
    }
    EXPECT_EQ(got, want) << response;
  }

  void Curl(const std::vector<std::string>& words) {
    // curl -s localhost:9464/PATH [| grep PATTERN]
    ASSERT_GE(words.size(), 3u);
    ASSERT_EQ(words[1], "-s");
    absl::string_view url = words[2];
    ASSERT_TRUE(absl::ConsumePrefix(&url, kMetricsHost)) << url;
    ASSERT_OK_AND_ASSIGN(
        aside::testing::HttpResponse response,
        aside::testing::HttpGet("127.0.0.1", server_.metrics_port,
                                std::string(url)));
    EXPECT_EQ(response.status, 200);
    if (words.size() == 3) {
      return;
    }
    ASSERT_EQ(words.size(), 6u);
    ASSERT_EQ(words[3], "|");
    ASSERT_EQ(words[4], "grep");
    int matched = 0;
    for (absl::string_view line : absl::StrSplit(response.body, '\n')) {
      matched += absl::StrContains(line, words[5]);
    }
    EXPECT_GT(matched, 0) << "grep " << words[5] << " found nothing";
  }

  void Asidectl(std::vector<std::string> words,
                const std::vector<std::string>& expected) {
    std::vector<std::string> argv = {
        "env", absl::StrCat("ASIDE_SERVER=", server_.target())};
    for (const auto& [key, value] : env_) {
      argv.push_back(absl::StrCat(key, "=", value));
    }
    argv.push_back(aside::testing::BinDir() + "/asidectl");
    argv.insert(argv.end(), words.begin() + 1, words.end());
    aside::testing::CommandResult r = aside::testing::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The printed lines, in order; "..." elides any number of lines.
    std::vector<std::string> got;
    for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
      got.push_back(Normalize(std::string(line)));
    }
    size_t at = 0;
    for (const std::string& line : expected) {
      if (line == "...") {
        continue;
      }
      const std::string want = Normalize(line);
      auto found = std::find(got.begin() + at, got.end(), want);
      ASSERT_TRUE(found != got.end())
          << "README line not printed (in order): " << line
          << "\nasidectl printed:\n"
          << r.output;
      at = found - got.begin() + 1;
    }
  }

  TempDir dir_;
  std::string var_;
  std::string token_;
  std::string readme_;
  std::vector<std::string> run_args_;
  RunningServer server_;
  std::map<std::string, std::string> vars_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<aside::testing::ReflectionClient> grpcurl_;
};

TEST_F(ReadmeWalkthroughTest, MakeRunIsTheDemoConfigWithATokenFile) {
  // The commands below rely on these: the demo groups and Admin open.
  EXPECT_THAT(
      run_args_,
      ::testing::ElementsAre(
          "--config", aside::testing::SourceDir() + "/examples/aside.yaml",
          "--state-dir", var_, "--admin-token-file",
          var_ + "/demo-admin-token"));
}

TEST_F(ReadmeWalkthroughTest, QuickStart) {
  EXPECT_GE(RunSection("## Quick start"), 5);
}

TEST_F(ReadmeWalkthroughTest, GrpcurlSession) {
  EXPECT_GE(RunSection("## A grpcurl session against the demo"), 8);
}

TEST_F(ReadmeWalkthroughTest, AdminWithGrpcurl) {
  EXPECT_GE(RunSection("## Changing groups at run time (Admin)"), 5);
}

TEST_F(ReadmeWalkthroughTest, Asidectl) {
  EXPECT_GE(RunSection("## asidectl"), 12);
}

}  // namespace
}  // namespace aside
