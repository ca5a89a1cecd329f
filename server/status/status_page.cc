#include "server/status/status_page.h"

#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/json.h"
#include "server/api/grpclb_service.h"
#include "server/auth/admin_auth.h"
#include "server/groups/group_registry.h"
#include "server/health/health_registry.h"
#include "server/load/load_aggregator.h"
#include "server/load/orca_collector.h"
#include "server/status/events.h"
#include "server/status/history.h"

namespace aside::server {
namespace {

// A rate sample older than this is replaced by the next snapshot.
constexpr int64_t kRateIntervalNanos = 1'000'000'000;

// JSON writing: each Field appends `"name":value,` and Close() drops the
// last comma before the closing bracket.
class JsonOut {
 public:
  std::string& str() { return out_; }
  void Open(char c) { out_.push_back(c); }
  void Close(char c) {
    if (!out_.empty() && out_.back() == ',') {
      out_.back() = c;
    } else {
      out_.push_back(c);
    }
    out_.push_back(',');
  }
  void Key(absl::string_view name) {
    AppendJsonString(&out_, name);
    out_.push_back(':');
  }
  void String(absl::string_view name, absl::string_view value) {
    Key(name);
    AppendJsonString(&out_, value);
    out_.push_back(',');
  }
  void Uint(absl::string_view name, uint64_t value) {
    Key(name);
    absl::StrAppend(&out_, value, ",");
  }
  void Bool(absl::string_view name, bool value) {
    Key(name);
    absl::StrAppend(&out_, value ? "true" : "false", ",");
  }
  // Rounded to 3 decimals; null when not finite.
  void Double(absl::string_view name, double value) {
    Key(name);
    if (std::isfinite(value)) {
      absl::StrAppend(&out_, absl::StrFormat("%.3f", value), ",");
    } else {
      out_.append("null,");
    }
  }
  void Null(absl::string_view name) {
    Key(name);
    out_.append("null,");
  }
  // The finished document (without the trailing comma).
  std::string Take() {
    if (!out_.empty() && out_.back() == ',') {
      out_.pop_back();
    }
    return std::move(out_);
  }

 private:
  std::string out_;
};

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

double Millis(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

std::string TargetKey(absl::string_view group, absl::string_view address) {
  return absl::StrCat(group, "\n", address);
}

// The first value of `name` in a query string, %-decoded ("+" is a space);
// empty when absent.
std::string QueryParam(absl::string_view query, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) {
      continue;
    }
    if (eq == absl::string_view::npos) {
      return "";
    }
    absl::string_view raw = pair.substr(eq + 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() &&
          absl::ascii_isxdigit(raw[i + 1]) &&
          absl::ascii_isxdigit(raw[i + 2])) {
        auto hex = [](char c) {
          return absl::ascii_isdigit(c) ? c - '0'
                                        : absl::ascii_tolower(c) - 'a' + 10;
        };
        out.push_back(
            static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
        i += 2;
      } else {
        out.push_back(raw[i] == '+' ? ' ' : raw[i]);
      }
    }
    return out;
  }
  return "";
}

}  // namespace

StoreStatus StoreStatusOf(const Store& store,
                          const fleet::Membership* membership) {
  const StoreState s = store.state();
  StoreStatus status{s.type, s.location, {}};
  status.details.emplace_back("up", s.up ? "yes" : "no");
  if (s.revision > 0) {
    status.details.emplace_back("revision", absl::StrCat(s.revision));
  }
  if (!s.last_error.empty()) {
    status.details.emplace_back("last error", s.last_error);
  }
  if (membership != nullptr) {
    std::vector<std::string> ids;
    for (const std::string& id : membership->member_ids()) {
      ids.push_back(id == membership->id() ? absl::StrCat(id, " (self)") : id);
    }
    status.details.emplace_back("fleet members", absl::StrJoin(ids, ", "));
    status.details.emplace_back("fleet membership",
                                membership->confirmed()
                                    ? "confirmed"
                                    : "not confirmed: probing every target");
  }
  return status;
}

StatusPage::StatusPage(StatusSources sources)
    : sources_(std::move(sources)),
      started_nanos_(sources_.clock->NowNanos()) {}

StatusPage::Rates StatusPage::UpdateRates(
    int64_t now_nanos, absl::flat_hash_map<std::string, uint64_t> counts) {
  aside::MutexLock lock(&rates_mu_);
  if (last_sample_.nanos != 0 &&
      now_nanos - last_sample_.nanos < kRateIntervalNanos) {
    return last_rates_;
  }
  Rates rates;
  if (last_sample_.nanos != 0) {
    const double seconds =
        static_cast<double>(now_nanos - last_sample_.nanos) / 1e9;
    for (const auto& [key, count] : counts) {
      auto it = last_sample_.counts.find(key);
      // New, or a counter that went down (a new object of the same name):
      // no rate until the next sample.
      if (it == last_sample_.counts.end() || it->second > count) {
        continue;
      }
      rates[key] = static_cast<double>(count - it->second) / seconds;
    }
  }
  last_sample_.nanos = now_nanos;
  last_sample_.counts = std::move(counts);
  last_rates_ = rates;
  return rates;
}

std::string StatusPage::Json() {
  const Clock& clock = *sources_.clock;
  const int64_t now_nanos = clock.NowNanos();
  const absl::Time wall_now = clock.WallNow();

  // Health targets: one List() (the registry's lock, briefly), indexed by
  // group and address for the backend rows.
  std::vector<TargetInfo> targets;
  if (sources_.health != nullptr) {
    targets = sources_.health->List();
  }
  // ORCA reports by backend (one lock of the collector's, briefly).
  absl::flat_hash_map<std::string, OrcaCollector::BackendView> orca;
  if (sources_.orca != nullptr) {
    orca = sources_.orca->BackendsByAddress();
  }
  absl::flat_hash_map<std::string, const TargetInfo*> target_by_member;
  for (const TargetInfo& t : targets) {
    for (const std::string& g : t.groups) {
      target_by_member.emplace(TargetKey(g, t.address), &t);
    }
  }

  // Pin every group's table and spec first, so counters and rows agree.
  struct GroupView {
    GroupPtr group;
    TableConstPtr table;
    std::shared_ptr<const GroupSpec> spec;
  };
  std::vector<GroupView> views;
  absl::flat_hash_map<std::string, uint64_t> counts;
  for (GroupPtr& g : sources_.groups->List()) {
    const std::shared_ptr<const Group::Publication> published = g->published();
    if (published == nullptr) {
      continue;
    }
    GroupView v{g, published->table, published->spec};
    uint64_t group_picks = 0;
    if (const GroupMetrics* gm = g->metrics(); gm != nullptr) {
      group_picks = static_cast<uint64_t>(gm->picks_ok->Value() +
                                          gm->picks_unavailable->Value());
    }
    counts[g->name()] = group_picks;
    for (const Member& m : v.table->members()) {
      if (m.load != nullptr) {
        counts[TargetKey(g->name(), m.backend.address)] = m.load->picks();
      }
    }
    views.push_back(std::move(v));
  }
  const Rates rates = UpdateRates(now_nanos, std::move(counts));
  auto rate = [&rates](const std::string& key) {
    auto it = rates.find(key);
    return it == rates.end() ? 0.0 : it->second;
  };

  JsonOut j;
  j.Open('{');
  j.String("version", ASIDE_VERSION);
  j.String("server_id", sources_.groups->server_id());
  j.String("now", TimeText(wall_now));
  j.Double("uptime_seconds",
           static_cast<double>(now_nanos - started_nanos_) / 1e9);
  j.Bool("require_token", sources_.require_token);

  j.Key("store");
  j.Open('{');
  if (sources_.store) {
    const StoreStatus store = sources_.store();
    j.String("type", store.type);
    j.String("location", store.location);
    j.Key("details");
    j.Open('{');
    for (const auto& [k, v] : store.details) {
      j.String(k, v);
    }
    j.Close('}');
  } else {
    j.String("type", "none");
  }
  j.Close('}');

  uint64_t total_backends = 0;
  uint64_t total_ready = 0;
  uint64_t total_watch = 0;
  uint64_t total_grpclb = 0;
  uint64_t panicking = 0;
  j.Key("groups");
  j.Open('[');
  for (const GroupView& v : views) {
    const Group& g = *v.group;
    const Table& table = *v.table;
    const GroupSpec& spec = *v.spec;
    j.Open('{');
    j.String("name", g.name());
    j.String("policy", spec.policy.name());
    j.String("source", spec.source == GroupSource::kFile ? "file" : "store");
    j.Uint("generation", table.generation());
    j.Uint("ready", table.ready_count());
    j.Uint("total", table.size());
    j.Bool("panic", table.panic());
    j.Double("panic_threshold", spec.panic_threshold);
    j.String("health_check", HealthCheckKindName(spec.health_check.kind));
    j.Bool("orca", spec.orca.enabled);
    j.Bool("orca_weights", OrcaWeightsApply(spec.orca, spec.policy));
    j.Double("picks_per_second", rate(g.name()));
    uint64_t watch = 0;
    if (const GroupMetrics* gm = g.metrics(); gm != nullptr) {
      watch = static_cast<uint64_t>(gm->watch_subscribers->Value());
    }
    const uint64_t grpclb =
        sources_.grpclb != nullptr ? sources_.grpclb->streams_for(g.name()) : 0;
    j.Uint("watch_subscribers", watch);
    j.Uint("grpclb_clients", grpclb);
    j.String("dns_error", g.dns_error());
    total_backends += table.size();
    total_ready += table.ready_count();
    total_watch += watch;
    total_grpclb += grpclb;
    panicking += table.panic() ? 1 : 0;

    std::map<std::string, OutlierDetector::Ejection> ejections;
    for (OutlierDetector::Ejection& e : g.Ejections()) {
      std::string address = e.address;
      ejections.emplace(std::move(address), std::move(e));
    }
    j.Key("backends");
    j.Open('[');
    for (size_t i = 0; i < table.size(); ++i) {
      const Member& m = table.member(static_cast<uint32_t>(i));
      const std::string& address = m.backend.address;
      const std::string key = TargetKey(g.name(), address);
      j.Open('{');
      j.String("address", address);
      j.Uint("weight", m.backend.weight);
      j.Uint("effective_weight", m.weight);
      j.Bool("ready", m.ready);
      j.Bool("eligible", table.eligible(static_cast<uint32_t>(i)));
      j.Bool("drained", m.backend.drained || m.backend.weight == 0);
      j.String("health", HealthStateName(m.health));
      if (!m.backend.locality.empty()) {
        std::string zone = m.backend.locality.ToString();
        while (!zone.empty() && zone.back() == '/') {
          zone.pop_back();
        }
        j.String("zone", zone);
      }
      j.Key("probe");
      auto t = target_by_member.find(key);
      if (t == target_by_member.end() || !t->second->last_result) {
        j.str().append("null,");
      } else {
        const ProbeResult& r = *t->second->last_result;
        j.Open('{');
        j.String("kind", HealthCheckKindName(t->second->spec.kind));
        j.Bool("success", r.success);
        j.String("reason", r.reason);
        j.Double("latency_ms", Millis(r.latency));
        j.Double("age_seconds",
                 absl::ToDoubleSeconds(wall_now - r.finished_at));
        j.Uint("consecutive_successes", t->second->consecutive_successes);
        j.Uint("consecutive_failures", t->second->consecutive_failures);
        j.Close('}');
      }
      j.Key("outlier");
      if (auto e = ejections.find(address); e != ejections.end()) {
        j.Open('{');
        j.Bool("ejected", true);
        j.Uint("count", e->second.count);
        j.String("until", TimeText(e->second.until));
        j.Close('}');
      } else {
        j.str().append("null,");
      }
      if (spec.orca.enabled && sources_.orca != nullptr) {
        // The backend's own report: what its weight follows.
        j.Key("orca");
        auto o = orca.find(address);
        if (o == orca.end()) {
          j.str().append("null,");
        } else {
          j.Open('{');
          j.String("state", o->second.state);
          if (o->second.last.has_value()) {
            const OrcaLoad& r = o->second.last->load;
            j.Double("utilization", OrcaUtilization(r));
            j.Double("cpu_utilization", r.cpu_utilization);
            j.Double("application_utilization", r.application_utilization);
            j.Double("qps", r.qps);
            j.Double("eps", r.eps);
            j.Double(
                "age_seconds",
                absl::ToDoubleSeconds(wall_now - o->second.last->received_at));
          }
          j.Uint("rejected", o->second.rejected);
          if (!o->second.last_error.empty()) {
            j.String("last_error", o->second.last_error);
          }
          j.Close('}');
        }
      }
      j.Key("load");
      j.Open('{');
      if (m.load != nullptr) {
        j.Double("latency_ewma_ms",
                 m.load->LastByteEwma(table.load_model()) / 1e6);
        // Without a completion the EWMA is the policy's default: the page
        // shows it as not measured.
        j.Bool("latency_ewma_measured", m.load->has_last_byte_sample());
      }
      j.Double("picks_per_second", rate(key));
      if (sources_.loads != nullptr) {
        const LoadSnapshot l = sources_.loads->Snapshot(g.name(), address);
        j.Uint("in_flight", l.in_flight);
        j.Double("requests_per_second", l.requests_per_second);
        j.Double("errors_per_second", l.requests_per_second * l.failure_ratio);
        j.Double("mean_latency_ms", Millis(l.mean_latency));
        j.Uint("reporters", l.reporters);
        if (l.utilization.has_value()) {
          j.Double("utilization", *l.utilization);
        }
      }
      j.Close('}');
      j.Close('}');
    }
    j.Close(']');
    j.Close('}');
  }
  j.Close(']');

  j.Key("targets");
  j.Open('[');
  for (const TargetInfo& t : targets) {
    j.Open('{');
    j.String("address", t.address);
    j.String("kind", HealthCheckKindName(t.spec.kind));
    j.String("state", HealthStateName(t.state));
    j.Uint("probes", t.probes);
    if (t.last_result) {
      j.Bool("last_success", t.last_result->success);
      j.String("last_reason", t.last_result->reason);
      j.Double("last_latency_ms", Millis(t.last_result->latency));
    }
    j.Key("groups");
    j.Open('[');
    for (const std::string& g : t.groups) {
      AppendJsonString(&j.str(), g);
      j.str().push_back(',');
    }
    j.Close(']');
    j.Close('}');
  }
  j.Close(']');

  j.Key("totals");
  j.Open('{');
  j.Uint("groups", views.size());
  j.Uint("backends", total_backends);
  j.Uint("ready", total_ready);
  j.Uint("panicking_groups", panicking);
  j.Uint("targets", targets.size());
  j.Uint("watch_subscribers", total_watch);
  j.Uint("grpclb_clients", total_grpclb);
  j.Close('}');
  j.Close('}');
  return j.Take();
}

std::optional<HttpResponse> StatusPage::Refuse(
    const HttpRequest& request) const {
  if (sources_.require_token) {
    HttpResponse response;
    response.headers.emplace_back("Cache-Control", "no-store");
    absl::string_view value = request.Header("authorization");
    const bool bearer = absl::StartsWithIgnoreCase(value, "bearer ");
    const AdminRole role =
        bearer && sources_.auth != nullptr
            ? sources_.auth->RoleOfToken(
                  absl::StripAsciiWhitespace(value.substr(7)))
            : AdminRole::kNone;
    if (role < AdminRole::kRead) {
      response.status = 401;
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      response.body = value.empty()
                          ? "status: send 'Authorization: Bearer <token>' "
                            "(a token of the Admin token file)\n"
                          : "status: unknown token\n";
      return response;
    }
    if (role == AdminRole::kSelfDrain) {
      // Every backend may hold one: it drains its own address, no more.
      response.status = 403;
      response.body = "status: a self-drain token may not read the status\n";
      return response;
    }
  }
  return std::nullopt;
}

HttpResponse StatusPage::ServeJson(const HttpRequest& request) {
  if (std::optional<HttpResponse> refused = Refuse(request)) {
    return *std::move(refused);
  }
  HttpResponse response;
  response.headers.emplace_back("Cache-Control", "no-store");
  response.content_type = "application/json";
  response.body = Json();
  return response;
}

std::vector<std::pair<std::string, HttpHandler>> StatusPage::Routes() {
  std::vector<std::pair<std::string, HttpHandler>> routes;
  routes.emplace_back("/", [](const HttpRequest&) {
    HttpResponse response;
    response.content_type = "text/html; charset=utf-8";
    response.body = std::string(Html());
    response.headers.emplace_back("Cache-Control", "no-cache");
    // The page talks to its own origin only.
    response.headers.emplace_back(
        "Content-Security-Policy",
        "default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    response.headers.emplace_back("X-Content-Type-Options", "nosniff");
    return response;
  });
  routes.emplace_back("/status.json", [this](const HttpRequest& request) {
    return ServeJson(request);
  });
  auto json = [](std::string body) {
    HttpResponse response;
    response.headers.emplace_back("Cache-Control", "no-store");
    response.content_type = "application/json";
    response.body = std::move(body);
    return response;
  };
  if (sources_.history != nullptr) {
    routes.emplace_back(
        "/status/history.json", [this, json](const HttpRequest& request) {
          if (std::optional<HttpResponse> refused = Refuse(request)) {
            return *std::move(refused);
          }
          const std::string group = QueryParam(request.query, "group");
          return json(sources_.history->Json(
              group, QueryParam(request.query, "backends") != "0",
              QueryParam(request.query, "after")));
        });
  }
  if (sources_.events != nullptr) {
    routes.emplace_back("/status/events.json", [this, json](
                                                   const HttpRequest& request) {
      if (std::optional<HttpResponse> refused = Refuse(request)) {
        return *std::move(refused);
      }
      return json(sources_.events->Json(QueryParam(request.query, "group")));
    });
  }
  return routes;
}

}  // namespace aside::server
