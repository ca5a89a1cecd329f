// The Grafana dashboard and the alerting rules against a real Prometheus
// (Debian's /usr/bin/prometheus) scraping a real aside-server every second:
// every panel's query returns data, every dashboard variable has values, the
// rules load and evaluate, and the alerts about a dead group go pending on
// the server's own series. The server has a gRPC-health-checked backend that
// answers, a TCP-checked one that does not, and an Admin-created group that
// a Watch stream follows while the test drains and undrains it.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/health/test_backends.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Context;
using ::aside::testing::Process;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::google::protobuf::ListValue;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;

constexpr char kToken[] = "prometheus-test-admin-token";
// What the test gives Grafana's $__rate_interval: four 1 s scrapes, as
// Grafana computes it for this scrape interval.
constexpr char kRateInterval[] = "4s";
// Metrics of features a server may not have (a shared store, config
// reloads): a panel or rule on them is checked only when the server
// exports samples of them.
const std::set<std::string>& OptionalMetrics() {
  static const auto* names =
      new std::set<std::string>{"aside_store_up", "aside_config_reloads_total"};
  return *names;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

absl::StatusOr<Struct> ParseJson(const std::string& json) {
  Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad JSON: ", status.ToString(), ": ", json.substr(0, 200)));
  }
  return s;
}

const Value* Field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string StringField(const Struct& s, const std::string& key) {
  const Value* v = Field(s, key);
  return v == nullptr ? "" : v->string_value();
}

// Metric names in a PromQL expression or a rule file, histogram series
// folded into their family.
std::set<std::string> MetricNames(const std::string& text) {
  std::set<std::string> out;
  static const std::regex kName("aside_[a-z0-9_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kName);
       it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(name, suffix)) {
        name.resize(name.size() - strlen(suffix));
      }
    }
    out.insert(name);
  }
  return out;
}

// The metric names registered in the server's sources: every literal
// .Name("aside_...") under server/.
std::set<std::string> RegisteredMetrics() {
  std::set<std::string> out;
  static const std::regex kRegistered(
      R"re(\.Name\(\s*"(aside_[a-z0-9_]+)"\))re");
  for (const auto& entry : std::filesystem::recursive_directory_iterator(
           testing::SourceDir() + "/server")) {
    if (entry.path().extension() != ".cc") {
      continue;
    }
    const std::string text = ReadFile(entry.path().string());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kRegistered);
         it != std::sregex_iterator(); ++it) {
      out.insert((*it)[1].str());
    }
  }
  return out;
}

// A dashboard query: panel title and expression.
struct PanelQuery {
  std::string panel;
  std::string expr;
};

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The backends: one answers grpc.health.v1 with SERVING, the other port
    // has nothing listening (TCP probes fail).
    ASSERT_OK_AND_ASSIGN(live_, testing::GrpcBackend::Start(true));
    live_->health().Set("", 1);
    dead_address_ = absl::StrCat("127.0.0.1:", testing::PickUnusedPort());
    const std::string config =
        dir_.WriteFile("aside.yaml", absl::StrCat(R"(load_reports: {auth: open}
groups:
  - name: live
    health_check: {kind: grpc, interval: 200ms, timeout: 100ms, rise: 1, fall: 1}
    backends: [)",
                                                  live_->address(), R"(]
  - name: dead
    health_check: {kind: tcp, interval: 200ms, timeout: 100ms, rise: 1, fall: 1}
    backends: [)",
                                                  dead_address_, "]\n"));
    const std::string tokens =
        dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    ASSERT_OK_AND_ASSIGN(
        server_, testing::StartServer(
                     dir_.path() + "/state",
                     {"--config", config, "--admin-token-file", tokens}));
    channel_ = grpc::CreateChannel(server_.target(),
                                   grpc::InsecureChannelCredentials());
    lb_ = v1::LoadBalancer::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);

    // A group from Admin that the traffic drains and undrains.
    v1::CreateGroupRequest create;
    create.mutable_group()->set_name("dynamic");
    create.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    create.mutable_group()->add_backends()->set_address("127.0.0.1:9001");
    create.mutable_group()->add_backends()->set_address("127.0.0.1:9002");
    v1::Group created;
    grpc::Status s =
        admin_->CreateGroup(Context(kToken).get(), create, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();

    // A Watch stream on every group, read until the test cancels it.
    watch_context_ = std::make_unique<grpc::ClientContext>();
    v1::WatchRequest watch;
    watch.add_groups("live");
    watch.add_groups("dead");
    watch.add_groups("dynamic");
    watch.set_subscriber("prometheus-test");
    watch_reader_ = lb_->Watch(watch_context_.get(), watch);
    watch_thread_ = std::thread([this] {
      v1::GroupUpdate update;
      while (watch_reader_->Read(&update)) {
        watch_updates_.fetch_add(1);
      }
    });

    // Prometheus scrapes the server every second and evaluates the rules.
    prometheus_port_ = testing::PickUnusedPort();
    const std::string prometheus_config = dir_.WriteFile(
        "prometheus.yml", absl::StrCat(R"(global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - )",
                                       RulesPath(), R"(
scrape_configs:
  - job_name: aside
    static_configs:
      - targets: ["127.0.0.1:)",
                                       server_.metrics_port, "\"]\n"));
    ASSERT_OK_AND_ASSIGN(
        prometheus_,
        Process::Start(
            {"/usr/bin/prometheus", "--config.file=" + prometheus_config,
             "--storage.tsdb.path=" + dir_.path() + "/tsdb",
             absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port_),
             "--log.level=warn"}));
    // At warn level Prometheus logs nothing on a good start; its API
    // answering is the sign it is up.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      auto r = testing::HttpGet("127.0.0.1", prometheus_port_, "/-/ready",
                                absl::Seconds(2));
      if (r.ok() && r->status == 200) {
        break;
      }
      ASSERT_LT(absl::Now(), deadline) << "Prometheus not ready:\n"
                                       << prometheus_->StderrText();
      prometheus_->DrainStderr(absl::Milliseconds(100));
    }
  }

  void TearDown() override {
    if (watch_context_ != nullptr) {
      watch_context_->TryCancel();
    }
    if (watch_thread_.joinable()) {
      watch_thread_.join();
    }
    if (HasFailure() && server_.process != nullptr) {
      server_.process->DrainStderr(absl::Milliseconds(200));
      std::cerr << "aside-server log:\n" << server_.process->StderrText();
    }
  }

  static std::string RulesPath() {
    return testing::SourceDir() + "/helm/aside/alerts/aside-rules.yaml";
  }
  static std::string DashboardPath() {
    return testing::SourceDir() + "/helm/aside/dashboards/aside.json";
  }

  // One round of everything the dashboard shows: picks that succeed and
  // fail, a table change (drain or undrain) that Watch carries, an Admin
  // write that is refused, and a load report with one accepted and one
  // rejected observation.
  void Traffic() {
    // Paced: a round every 300 ms is plenty for 1 s scrapes (and this is
    // pacing, not synchronisation: the callers poll Prometheus, bounded).
    if (round_ > 0) {
      absl::SleepFor(absl::Milliseconds(300));
    }
    ++round_;
    // Every round logs two Admin mutations: keep reading the server's
    // stderr, or a long run fills the pipe and the server blocks on its
    // next log line.
    server_.process->ReadAvailable();
    for (const char* group : {"live", "live", "dead"}) {
      v1::PickRequest pick;
      pick.set_group(group);
      v1::PickResponse response;
      lb_->Pick(Context().get(), pick, &response);
    }
    v1::DrainBackendsRequest drain;
    drain.set_group("dynamic");
    drain.add_addresses("127.0.0.1:9002");
    drain.set_drained(round_ % 2 == 1);
    v1::Group group;
    grpc::Status s =
        admin_->DrainBackends(Context(kToken).get(), drain, &group);
    EXPECT_TRUE(s.ok()) << s.error_message();
    v1::AddBackendsRequest bad;
    bad.set_group("dynamic");
    bad.add_backends()->set_address("1.2.3.4");
    s = admin_->AddBackends(Context(kToken).get(), bad, &group);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();

    v1::ReportLoadResponse load_response;
    auto context = Context();
    auto writer = lb_->ReportLoad(context.get(), &load_response);
    v1::LoadReport report;
    report.set_reporter("prometheus-test");
    v1::BackendLoad* load = report.add_loads();
    load->set_group("live");
    load->set_address(live_->address());
    load->set_requests(10 * round_);
    v1::BackendLoad* unknown = report.add_loads();
    unknown->set_group("no-such-group");
    unknown->set_address("127.0.0.1:1");
    unknown->set_requests(1);
    writer->Write(report);
    writer->WritesDone();
    s = writer->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  // Runs an API GET on Prometheus; returns the "data" member.
  absl::StatusOr<Value> Api(const std::string& target) {
    auto r = testing::HttpGet("127.0.0.1", prometheus_port_, target,
                              absl::Seconds(5));
    if (!r.ok()) {
      return r.status();
    }
    absl::StatusOr<Struct> body = ParseJson(r->body);
    if (!body.ok()) {
      return body.status();
    }
    if (r->status != 200 || StringField(*body, "status") != "success") {
      return absl::InvalidArgumentError(
          absl::StrCat(target, ": HTTP ", r->status, ": ", r->body));
    }
    const Value* data = Field(*body, "data");
    return data == nullptr ? Value() : *data;
  }

  // Number of series an instant query returns.
  absl::StatusOr<int> QuerySize(const std::string& expr) {
    absl::StatusOr<Value> data =
        Api(absl::StrCat("/api/v1/query?query=", UrlEncode(expr)));
    if (!data.ok()) {
      return data.status();
    }
    const Value* result = Field(data->struct_value(), "result");
    return result == nullptr ? 0 : result->list_value().values_size();
  }

  // The /metrics text of the server.
  std::string Scrape() {
    auto r = testing::HttpGet("127.0.0.1", server_.metrics_port, "/metrics");
    EXPECT_OK(r);
    return r.ok() ? r->body : "";
  }

  // Whether the exposition has a sample of `family`.
  static bool HasSamples(const std::string& exposition,
                         const std::string& family) {
    std::istringstream lines(exposition);
    std::string line;
    while (std::getline(lines, line)) {
      if (!absl::StartsWith(line, family)) {
        continue;
      }
      const std::string rest = line.substr(family.size());
      for (const char* suffix : {"", "_bucket", "_sum", "_count"}) {
        if (absl::StartsWith(rest, suffix) && (rest.size() > strlen(suffix)) &&
            (rest[strlen(suffix)] == '{' || rest[strlen(suffix)] == ' ')) {
          return true;
        }
      }
    }
    return false;
  }

  TempDir dir_;
  std::unique_ptr<testing::GrpcBackend> live_;
  std::string dead_address_;
  RunningServer server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::ClientContext> watch_context_;
  std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> watch_reader_;
  std::thread watch_thread_;
  std::atomic<int> watch_updates_{0};
  std::unique_ptr<Process> prometheus_;
  int prometheus_port_ = 0;
  int round_ = 0;
};

// The dashboard's variables: name -> the value "All" stands for.
std::map<std::string, std::string> AllValues(const Struct& dashboard) {
  std::map<std::string, std::string> out;
  const Value* templating = Field(dashboard, "templating");
  if (templating == nullptr) {
    return out;
  }
  const Value* list = Field(templating->struct_value(), "list");
  for (const Value& v : list->list_value().values()) {
    if (StringField(v.struct_value(), "type") == "query") {
      out[StringField(v.struct_value(), "name")] =
          StringField(v.struct_value(), "allValue");
    }
  }
  return out;
}

std::string Substitute(std::string expr,
                       const std::map<std::string, std::string>& all) {
  std::vector<std::pair<std::string, std::string>> replacements = {
      {"$__rate_interval", kRateInterval}};
  for (const auto& [name, value] : all) {
    replacements.push_back({"$" + name, value});
  }
  return absl::StrReplaceAll(expr, replacements);
}

void CollectQueries(const ListValue& panels, std::vector<PanelQuery>* out,
                    int* panel_count) {
  for (const Value& p : panels.values()) {
    const Struct& panel = p.struct_value();
    if (const Value* nested = Field(panel, "panels")) {
      CollectQueries(nested->list_value(), out, panel_count);
    }
    const Value* targets = Field(panel, "targets");
    if (targets == nullptr) {
      continue;
    }
    ++*panel_count;
    for (const Value& t : targets->list_value().values()) {
      out->push_back(PanelQuery{StringField(panel, "title"),
                                StringField(t.struct_value(), "expr")});
    }
  }
}

TEST_F(PrometheusTest, EveryDashboardPanelReturnsData) {
  ASSERT_OK_AND_ASSIGN(Struct dashboard, ParseJson(ReadFile(DashboardPath())));
  const std::map<std::string, std::string> all = AllValues(dashboard);
  ASSERT_EQ(all.size(), 3u);
  std::vector<PanelQuery> queries;
  int panel_count = 0;
  CollectQueries(Field(dashboard, "panels")->list_value(), &queries,
                 &panel_count);
  ASSERT_GE(panel_count, 20);

  // Every metric a panel or a rule names is one the server registers (a
  // literal .Name("aside_...") in server/), or one of a feature this
  // server may lack.
  const std::set<std::string> registered = RegisteredMetrics();
  ASSERT_GE(registered.size(), 30u);
  std::set<std::string> names = MetricNames(ReadFile(RulesPath()));
  for (const PanelQuery& q : queries) {
    const std::set<std::string> in_query = MetricNames(q.expr);
    EXPECT_FALSE(in_query.empty()) << q.panel;
    names.insert(in_query.begin(), in_query.end());
  }
  for (const std::string& name : names) {
    EXPECT_TRUE(registered.count(name) > 0 || OptionalMetrics().count(name) > 0)
        << name << " is not a metric of aside-server";
  }
  // A metric of an optional feature is checked when this server has
  // samples of it.
  Traffic();
  const std::string exposition = Scrape();
  std::set<std::string> optional_absent;
  for (const std::string& name : OptionalMetrics()) {
    if (!HasSamples(exposition, name)) {
      optional_absent.insert(name);
    }
  }

  // Every query, with the variables at "All", returns data within a bounded
  // wait while traffic runs.
  std::map<std::string, PanelQuery> pending;
  for (const PanelQuery& q : queries) {
    const std::string expr = Substitute(q.expr, all);
    ASSERT_EQ(expr.find('$'), std::string::npos) << q.expr;
    bool optional = false;
    for (const std::string& name : MetricNames(expr)) {
      optional = optional || optional_absent.count(name) > 0;
    }
    if (optional) {
      // A query on a metric this server does not export must still parse.
      ASSERT_OK_AND_ASSIGN(int size, QuerySize(expr));
      EXPECT_EQ(size, 0) << q.panel;
      continue;
    }
    pending[expr] = q;
  }
  ASSERT_GE(pending.size(), 25u);
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  while (!pending.empty() && absl::Now() < deadline) {
    Traffic();
    for (auto it = pending.begin(); it != pending.end();) {
      absl::StatusOr<int> size = QuerySize(it->first);
      ASSERT_OK(size) << it->second.panel;
      it = *size > 0 ? pending.erase(it) : std::next(it);
    }
  }
  for (const auto& [expr, q] : pending) {
    ADD_FAILURE() << "panel \"" << q.panel << "\" has no data: " << expr;
  }
  EXPECT_GT(watch_updates_.load(), 3);

  // Every variable's label_values() query finds values.
  const Value* list =
      Field(Field(dashboard, "templating")->struct_value(), "list");
  static const std::regex kLabelValues(R"(^label_values\((.*),\s*(\w+)\)$)");
  for (const Value& v : list->list_value().values()) {
    const Struct& var = v.struct_value();
    if (StringField(var, "type") != "query") {
      continue;
    }
    const std::string query = StringField(var, "definition");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(query, m, kLabelValues)) << query;
    ASSERT_OK_AND_ASSIGN(
        Value values,
        Api(absl::StrCat("/api/v1/label/", m[2].str(), "/values?match[]=",
                         UrlEncode(Substitute(m[1], all)))));
    EXPECT_GT(values.list_value().values_size(), 0) << query;
  }
}

TEST_F(PrometheusTest, AlertRulesEvaluateOnTheServersSeries) {
  // Every rule of the file is loaded and evaluates without error.
  const std::set<std::string> expected = {
      "AsideGroupNoReadyBackend",   "AsideGroupPanic",
      "AsideProbeFailureRatioHigh", "AsideStoreUnavailable",
      "AsideConfigReloadFailing",   "AsideWatchFanoutLagHigh",
      "AsideInternalErrors",        "AsideDnsStale",
      "AsideFleetLoadViewStale"};
  // The alerts the dead group and its failing TCP probes raise: pending,
  // since every rule waits longer than this test runs.
  const std::set<std::string> wanted = {"AsideGroupNoReadyBackend/dead",
                                        "AsideGroupPanic/dead",
                                        "AsideProbeFailureRatioHigh/tcp"};
  std::set<std::string> healthy, raised;
  std::string last;
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  while ((healthy != expected || raised != wanted) && absl::Now() < deadline) {
    Traffic();
    ASSERT_OK_AND_ASSIGN(Value rules, Api("/api/v1/rules?type=alert"));
    healthy.clear();
    for (const Value& g :
         Field(rules.struct_value(), "groups")->list_value().values()) {
      for (const Value& r :
           Field(g.struct_value(), "rules")->list_value().values()) {
        const Struct& rule = r.struct_value();
        EXPECT_NE(StringField(rule, "health"), "err")
            << StringField(rule, "name") << ": "
            << StringField(rule, "lastError");
        if (StringField(rule, "health") == "ok") {
          healthy.insert(StringField(rule, "name"));
        }
      }
    }
    ASSERT_OK_AND_ASSIGN(Value alerts, Api("/api/v1/alerts"));
    raised.clear();
    last.clear();
    for (const Value& a :
         Field(alerts.struct_value(), "alerts")->list_value().values()) {
      const Struct& alert = a.struct_value();
      const Struct& labels = Field(alert, "labels")->struct_value();
      const std::string name = StringField(labels, "alertname");
      const std::string about = StringField(labels, "group").empty()
                                    ? StringField(labels, "kind")
                                    : StringField(labels, "group");
      absl::StrAppend(&last, name, "/", about, " ", StringField(alert, "state"),
                      "; ");
      // Nothing about the healthy group or the answering gRPC backend.
      EXPECT_NE(about, "live") << name;
      EXPECT_NE(about, "grpc") << name;
      EXPECT_NE(about, "dynamic") << name;
      EXPECT_FALSE(StringField(labels, "severity").empty()) << name;
      EXPECT_NE(
          StringField(Field(alert, "annotations")->struct_value(), "summary"),
          "")
          << name;
      raised.insert(absl::StrCat(name, "/", about));
    }
  }
  EXPECT_EQ(healthy, expected);
  EXPECT_EQ(raised, wanted) << last;
}

}  // namespace
}  // namespace aside
