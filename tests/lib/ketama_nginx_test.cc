// Aside's ketama against the real nginx: the same upstream with
// `hash $request_uri consistent` must pick, for every URI, the backend
// Aside picks for that key. nginx runs as this test's own process on
// loopback; the upstream servers do not listen (each request fails with
// 502 after nginx logs its first choice in $upstream_addr).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/random.h"
#include "lib/table.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

std::string FindNginx() {
  for (const char* path :
       {"/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"}) {
    if (access(path, X_OK) == 0) {
      return path;
    }
  }
  return "";
}

TEST(KetamaNginxTest, PicksWhatNginxHashConsistentPicks) {
  const std::string nginx = FindNginx();
  if (nginx.empty()) {
    GTEST_SKIP() << "nginx is not installed (Debian package nginx-light)";
  }
  testing::TempDir dir;

  // Mixed weights, IPv4 and IPv6, addresses whose text order differs from
  // their numeric order. Nothing listens on these ports.
  struct Server {
    std::string host;
    uint32_t weight;
  };
  const std::vector<Server> servers = {
      {"127.0.0.2", 1},  {"127.0.0.3", 3}, {"127.0.0.4", 2}, {"127.0.0.10", 5},
      {"127.0.0.11", 1}, {"[::1]", 2},     {"127.0.0.5", 4}, {"127.0.0.6", 1}};
  TableSpec spec;
  spec.group = "nginx";
  spec.policy.kind = PolicyKind::kKetama;
  spec.panic_threshold = 0;
  for (const Server& s : servers) {
    Member m;
    m.backend.address = absl::StrCat(s.host, ":", testing::PickUnusedPort());
    m.weight = s.weight;
    m.backend.weight = s.weight;
    spec.members.push_back(std::move(m));
  }
  ASSERT_OK_AND_ASSIGN(TableConstPtr table,
                       Table::Create(spec, nullptr, nullptr));

  // nginx keeps the first of two points with the same hash in config order;
  // Aside in address order: list the servers in the table's order.
  std::string upstream;
  for (const Member& m : table->members()) {
    absl::StrAppend(&upstream, "    server ", m.backend.address,
                    " weight=", m.weight, " max_fails=0;\n");
  }
  const int port = testing::PickUnusedPort();
  const std::string& d = dir.path();
  const std::string conf =
      dir.WriteFile("nginx.conf", absl::StrCat(R"(
daemon off;
master_process off;
worker_processes 1;
pid )",
                                               d, R"(/nginx.pid;
error_log )",
                                               d, R"(/error.log info;
events { worker_connections 256; }
http {
  client_body_temp_path )",
                                               d, R"(/body;
  proxy_temp_path )",
                                               d, R"(/proxy;
  fastcgi_temp_path )",
                                               d, R"(/fastcgi;
  uwsgi_temp_path )",
                                               d, R"(/uwsgi;
  scgi_temp_path )",
                                               d, R"(/scgi;
  log_format picks '$request_uri $upstream_addr';
  upstream pool {
    hash $request_uri consistent;
)",
                                               upstream, R"(  }
  server {
    listen 127.0.0.1:)",
                                               port, R"(;
    access_log )",
                                               d, R"(/picks.log picks;
    location / {
      proxy_pass http://pool;
      proxy_connect_timeout 1s;
      proxy_next_upstream off;
    }
  }
}
)"));
  ASSERT_OK_AND_ASSIGN(
      auto process, testing::Process::Start({nginx, "-p", d + "/", "-c", conf,
                                             "-e", d + "/error.log"}));

  // Wait (bounded) until nginx answers.
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = testing::HttpGet("127.0.0.1", port, "/ready", absl::Seconds(2)).ok();
    if (!up) {
      ASSERT_FALSE(process->Wait(absl::Milliseconds(25)).has_value())
          << "nginx exited: " << process->StderrText();
    }
  }
  ASSERT_TRUE(up) << "nginx did not answer on port " << port;

  FastRng rng(20260608);
  std::vector<std::string> uris = {"/", "/index.html", "/a/b/c?x=1&y=2"};
  for (int i = 0; i < 400; ++i) {
    uris.push_back(absl::StrCat("/item/", rng.Below(1000000),
                                "?user=", rng.Below(5000), "&v=", i));
  }
  for (const std::string& uri : uris) {
    auto response = testing::HttpGet("127.0.0.1", port, uri, absl::Seconds(5));
    ASSERT_OK(response);
    EXPECT_EQ(response->status, 502) << uri;
  }
  process->Signal(SIGQUIT);
  ASSERT_TRUE(process->Wait(absl::Seconds(10)).has_value());

  std::ifstream log(d + "/picks.log");
  std::string line;
  std::map<std::string, int> by_backend;
  int compared = 0;
  while (std::getline(log, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    ASSERT_EQ(fields.size(), 2u) << line;
    PickRequest r;
    r.key = fields[0];
    std::array<uint32_t, 1> out;
    ASSERT_EQ(table->Pick(r, absl::MakeSpan(out)), 1u);
    EXPECT_EQ(table->member(out[0]).backend.address, fields[1])
        << "uri " << fields[0];
    by_backend[fields[1]]++;
    ++compared;
  }
  EXPECT_GE(compared, static_cast<int>(uris.size()));
  // Every backend got some of the keys: the comparison covers the ring.
  EXPECT_EQ(by_backend.size(), servers.size());
}

}  // namespace
}  // namespace aside
