// The settings declared once (server/config/server_settings.h): the
// reference in docs/operations.md is theirs, every declared key is read
// from its place in the file, and a reload applies exactly the live ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/config/config.h"
#include "server/config/server_settings.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The table under "### Server keys" in docs/operations.md, line by line.
absl::StatusOr<std::string> DocumentedReference() {
  const std::string path =
      absl::StrCat(aside::testing::SourceDir(), "/docs/operations.md");
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::string out;
  bool in_section = false;
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "#")) {
      in_section = line == "### Server keys";
      continue;
    }
    if (in_section && absl::StartsWith(line, "|")) {
      absl::StrAppend(&out, line, "\n");
    }
  }
  if (out.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, " has no table under \"### Server keys\""));
  }
  return out;
}

TEST(SettingsTest, TheDocsReferenceIsTheDeclaredSettings) {
  ASSERT_OK_AND_ASSIGN(std::string documented, DocumentedReference());
  EXPECT_EQ(documented, SettingsReference())
      << "docs/operations.md, \"### Server keys\", should hold:\n"
      << SettingsReference();
}

TEST(SettingsTest, EachDocLineGivesTheRangeErrorsGive) {
  for (const Setting& s : ServerSettings()) {
    if (!s.range.empty()) {
      EXPECT_THAT(s.doc, HasSubstr(s.range)) << s.key;
    }
  }
}

// A file that sets `key` (dotted) to `value`, its blocks nested.
std::string FileSetting(const std::string& key, const std::string& value) {
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StrAppend(&out, std::string(2 * i, ' '), parts[i], ":",
                    i + 1 < parts.size() ? "\n" : absl::StrCat(" ", value));
  }
  return absl::StrCat(out, "\n");
}

TEST(SettingsTest, EveryKeyIsReadFromItsPlaceInTheFile) {
  for (const Setting& s : ServerSettings()) {
    // A mapping is the wrong type for every setting, so an error names it
    // with its line only if the key is read where the reference says.
    absl::StatusOr<ServerConfig> c =
        ParseConfig(FileSetting(s.key, "{x: 1}"), "aside.yaml");
    ASSERT_FALSE(c.ok()) << s.key;
    const int line = static_cast<int>(
        std::vector<std::string>(absl::StrSplit(s.key, '.')).size());
    EXPECT_THAT(c.status().message(),
                HasSubstr(absl::StrCat("aside.yaml:", line, ":")))
        << s.key;
    EXPECT_THAT(c.status().message(), HasSubstr(s.key));
  }
}

TEST(SettingsTest, BlocksAllowExactlyTheirDeclaredKeys) {
  EXPECT_THAT(SettingBlockKeys("tls"),
              ElementsAre("cert_file", "key_file", "client_ca_file",
                          "require_client_cert"));
  EXPECT_THAT(SettingBlockKeys("store"), ElementsAre("type", "etcd"));
  EXPECT_THAT(SettingBlockKeys("nowhere"), IsEmpty());
  absl::StatusOr<ServerConfig> c =
      ParseConfig("tls:\n  cert: a.pem\n", "aside.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("aside.yaml:2:3: tls.cert: unknown key (allowed: "
                        "cert_file, key_file, client_ca_file, "
                        "require_client_cert)"));
}

TEST(SettingsTest, AReloadAppliesOnlyTheLiveSettings) {
  ASSERT_OK_AND_ASSIGN(ServerConfig running, ParseConfig("", "aside.yaml"));
  ASSERT_OK_AND_ASSIGN(
      ServerConfig next,
      ParseConfig("log_level: debug\nlisten: 127.0.0.1:1\n"
                  "config_reload: {watch: false}\n"
                  "status_page: {enabled: false}\n"
                  "load_reports: {max_reporter_share: 0.5}\n"
                  "groups:\n  - name: g\n    backends: [127.0.0.1:1]\n",
                  "aside.yaml"));
  ServerConfig after = running;
  AdoptLiveSettings(next, &after);
  EXPECT_EQ(after.log_level, "debug");
  EXPECT_FALSE(after.reload_watch);
  ASSERT_EQ(after.groups.size(), 1u);
  EXPECT_EQ(after.groups[0].name, "g");
  EXPECT_EQ(after.listen, running.listen);
  EXPECT_TRUE(after.status_page_enabled);
  EXPECT_EQ(after.load_reports_max_reporter_share, 0.25);
  // What was not applied is reported, each key once.
  EXPECT_THAT(RestartOnlyChanges(running, next),
              ElementsAre("listen", "status_page.enabled",
                          "load_reports.max_reporter_share"));
}

}  // namespace
}  // namespace aside::server
