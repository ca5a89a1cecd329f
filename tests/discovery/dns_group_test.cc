// Groups following DNS in the real server: members added and removed with
// the records, one generation per change, and a dead DNS server keeping the
// last members while the failure is reported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "server/server.h"
#include "tests/discovery/dns_test_servers.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::Dnsmasq;

std::set<std::string> Members(const Group& g) {
  std::set<std::string> out;
  for (const Member& m : g.table()->members()) {
    out.insert(m.backend.address);
  }
  return out;
}

// Polls (bounded) until the group's members equal `want`; there is no
// event for "DNS answered", the table is the observable.
bool WaitForMembers(const Group& g, const std::set<std::string>& want,
                    absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Members(g) == want) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return Members(g) == want;
}

TEST(DnsGroupTest, MembersFollowRecordsAndSurviveADeadServer) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Dnsmasq> dns,
      Dnsmasq::Start({.hosts = "127.0.0.11 web.test\n127.0.0.12 web.test\n"}));
  aside::testing::TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      ServerConfig config,
      ParseConfig(absl::StrCat("state_dir: ", dir.path(), "\n",
                               "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                               "discovery: {dns_servers: [\"", dns->server(),
                               "\"]}\n", R"(
groups:
  - name: web
    health_check: {kind: none}
    backends: [127.0.0.1:7000]
    dns: {name: web.test, port: 8080, interval: 1s, weight: 50}
)"),
                  "t.yaml"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AsideServer> server,
                       AsideServer::Create(config));
  ASSERT_OK(server->Start());
  GroupPtr web = server->groups().Find("web");
  ASSERT_TRUE(WaitForMembers(
      *web, {"127.0.0.1:7000", "127.0.0.11:8080", "127.0.0.12:8080"}));
  const TableConstPtr first = web->table();
  EXPECT_EQ(first->member(first->Find("127.0.0.11:8080")).weight, 50u);

  ASSERT_OK(dns->SetHosts("127.0.0.12 web.test\n127.0.0.13 web.test\n"));
  ASSERT_TRUE(WaitForMembers(
      *web, {"127.0.0.1:7000", "127.0.0.12:8080", "127.0.0.13:8080"}));
  EXPECT_GT(web->table()->generation(), first->generation());
  EXPECT_EQ(web->dns_error(), "");

  // The DNS server dies: the last members stay, the failure is reported.
  const uint64_t before = web->table()->generation();
  ASSERT_OK(dns->Stop());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (web->dns_error().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(web->dns_error(), "");
  EXPECT_EQ(Members(*web),
            (std::set<std::string>{"127.0.0.1:7000", "127.0.0.12:8080",
                                   "127.0.0.13:8080"}));
  EXPECT_EQ(web->table()->generation(), before);  // nothing republished

  // It comes back with other records: followed again, error cleared.
  ASSERT_OK(dns->Restart({}));
  ASSERT_OK(dns->SetHosts("127.0.0.14 web.test\n"));
  ASSERT_TRUE(WaitForMembers(*web, {"127.0.0.1:7000", "127.0.0.14:8080"},
                             absl::Seconds(30)));
  EXPECT_EQ(web->dns_error(), "");
  server->Shutdown(absl::Seconds(1));
  server->Wait();
}

}  // namespace
}  // namespace aside::server
