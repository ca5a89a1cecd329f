#include "bench/scenario/scenario.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/duration.h"

namespace aside::bench {
namespace {

// More would not be a benchmark any machine runs.
constexpr uint32_t kMaxBackends = 100000;
constexpr uint32_t kMaxClients = 100000;

class LineParser {
 public:
  LineParser(absl::string_view source, int line)
      : source_(source), line_(line) {}

  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", line_, ": ", message));
  }

  absl::StatusOr<absl::Duration> Duration(absl::string_view what,
                                          absl::string_view text) const {
    absl::StatusOr<absl::Duration> d = ParseDurationText(text);
    if (!d.ok()) {
      return Error(absl::StrCat(what, ": ", d.status().message()));
    }
    return *d;
  }

  absl::StatusOr<double> Positive(absl::string_view what,
                                  absl::string_view text) const {
    double v = 0;
    if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v <= 0) {
      return Error(absl::StrCat(what, ": '", text, "' is not a number > 0"));
    }
    return v;
  }

  absl::StatusOr<uint64_t> Count(absl::string_view what, absl::string_view text,
                                 uint64_t min, uint64_t max) const {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
      return Error(absl::StrCat(what, ": '", text, "' is not an integer in ",
                                min, "..", max));
    }
    return v;
  }

  // key=value words into a map; every key must be in `allowed`.
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> Pairs(
      absl::Span<const absl::string_view> words,
      absl::Span<const absl::string_view> allowed) const {
    absl::flat_hash_map<std::string, std::string> out;
    for (absl::string_view w : words) {
      const size_t eq = w.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return Error(absl::StrCat("'", w, "' is not key=value"));
      }
      const absl::string_view key = w.substr(0, eq);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(absl::StrCat("unknown key '", key, "'"));
      }
      if (!out.emplace(std::string(key), std::string(w.substr(eq + 1)))
               .second) {
        return Error(absl::StrCat("key '", key, "' given twice"));
      }
    }
    return out;
  }

 private:
  absl::string_view source_;
  int line_;
};

#define SCENARIO_ASSIGN(lhs, expr)      \
  do {                                  \
    auto scenario_result_ = (expr);     \
    if (!scenario_result_.ok()) {       \
      return scenario_result_.status(); \
    }                                   \
    lhs = *std::move(scenario_result_); \
  } while (false)

bool IsPolicyWord(absl::string_view w) {
  if (w.empty()) {
    return false;
  }
  for (char c : w) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') {
      return false;
    }
  }
  return true;
}

}  // namespace

double ScenarioBackend::calls_per_second() const {
  if (sinkhole) {
    return 0;
  }
  return slots * capacity / absl::ToDoubleSeconds(service);
}

double Scenario::AggregateCapacity() const {
  double sum = 0;
  for (const ScenarioBackend& b : backends) {
    sum += b.calls_per_second();
  }
  return sum;
}

absl::Duration Scenario::MeanCallTime() const {
  const double total = AggregateCapacity();
  if (total <= 0) {
    return absl::ZeroDuration();
  }
  double seconds = 0;
  for (const ScenarioBackend& b : backends) {
    seconds +=
        b.calls_per_second() / total * absl::ToDoubleSeconds(b.call_time());
  }
  return absl::Seconds(seconds);
}

double Scenario::CapacityFactor(uint32_t b, absl::Duration t) const {
  double factor = 1;
  for (const ScenarioEvent& e : events) {
    if (e.backend != b || t < e.at || t >= e.end()) {
      continue;
    }
    switch (e.kind) {
      case ScenarioEvent::Kind::kCapacity:
        factor *= e.capacity;
        break;
      case ScenarioEvent::Kind::kStall:
        return 0;
      case ScenarioEvent::Kind::kWarmup:
        factor *= 0.1 + 0.9 * absl::FDivDuration(t - e.at, e.length);
        break;
    }
  }
  return factor;
}

absl::StatusOr<Scenario> ParseScenario(absl::string_view text,
                                       absl::string_view source) {
  Scenario s;
  s.source = std::string(source);
  bool have_loads = false;
  bool have_policies = false;
  int line_no = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    LineParser p(source, line_no);
    const size_t hash = raw.find('#');
    if (hash != absl::string_view::npos) {
      raw = raw.substr(0, hash);
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(raw, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) {
      continue;
    }
    const absl::string_view directive = words[0];
    const absl::Span<const absl::string_view> args =
        absl::MakeConstSpan(words).subspan(1);
    auto one_arg = [&]() -> absl::Status {
      if (args.size() != 1) {
        return p.Error(absl::StrCat(directive, " takes one value"));
      }
      return absl::OkStatus();
    };
    if (directive == "seed") {
      if (absl::Status st = one_arg(); !st.ok()) return st;
      SCENARIO_ASSIGN(s.seed, p.Count("seed", args[0], 0, UINT64_MAX));
    } else if (directive == "duration" || directive == "warmup" ||
               directive == "deadline") {
      if (absl::Status st = one_arg(); !st.ok()) return st;
      absl::Duration d;
      SCENARIO_ASSIGN(d, p.Duration(directive, args[0]));
      if (directive != "warmup" && d <= absl::ZeroDuration()) {
        return p.Error(absl::StrCat(directive, " must be > 0"));
      }
      (directive == "duration" ? s.duration
       : directive == "warmup" ? s.warmup
                               : s.deadline) = d;
    } else if (directive == "clients") {
      if (absl::Status st = one_arg(); !st.ok()) return st;
      SCENARIO_ASSIGN(s.clients, p.Count("clients", args[0], 1, kMaxClients));
    } else if (directive == "backend" || directive == "sinkhole") {
      const bool sinkhole = directive == "sinkhole";
      absl::flat_hash_map<std::string, std::string> kv;
      SCENARIO_ASSIGN(kv,
                      p.Pairs(args, {"count", "slots", "service", "capacity"}));
      ScenarioBackend b;
      b.sinkhole = sinkhole;
      uint64_t count = 1;
      if (auto it = kv.find("count"); it != kv.end()) {
        SCENARIO_ASSIGN(count, p.Count("count", it->second, 1, kMaxBackends));
      }
      if (auto it = kv.find("slots"); it != kv.end()) {
        SCENARIO_ASSIGN(b.slots, p.Count("slots", it->second, 1, 1 << 20));
      }
      if (auto it = kv.find("service"); it != kv.end()) {
        SCENARIO_ASSIGN(b.service, p.Duration("service", it->second));
        if (b.service <= absl::ZeroDuration()) {
          return p.Error("service must be > 0");
        }
      }
      if (auto it = kv.find("capacity"); it != kv.end()) {
        SCENARIO_ASSIGN(b.capacity, p.Positive("capacity", it->second));
      }
      if (s.backends.size() + count > kMaxBackends) {
        return p.Error(absl::StrCat("more than ", kMaxBackends, " backends"));
      }
      s.backends.insert(s.backends.end(), count, b);
    } else if (directive == "loads") {
      if (args.empty()) {
        return p.Error("loads takes at least one value");
      }
      s.loads.clear();
      for (absl::string_view a : args) {
        double v;
        SCENARIO_ASSIGN(v, p.Positive("loads", a));
        s.loads.push_back(v);
      }
      have_loads = true;
    } else if (directive == "event") {
      absl::flat_hash_map<std::string, std::string> kv;
      SCENARIO_ASSIGN(kv, p.Pairs(args, {"at", "backend", "capacity", "for",
                                         "stall", "warmup"}));
      ScenarioEvent e;
      e.line = line_no;
      if (!kv.contains("at") || !kv.contains("backend")) {
        return p.Error("event needs at= and backend=");
      }
      SCENARIO_ASSIGN(e.at, p.Duration("at", kv["at"]));
      uint64_t backend;
      SCENARIO_ASSIGN(backend,
                      p.Count("backend", kv["backend"], 0, kMaxBackends));
      e.backend = static_cast<uint32_t>(backend);
      const int kinds = kv.contains("capacity") + kv.contains("stall") +
                        kv.contains("warmup");
      if (kinds != 1) {
        return p.Error("event needs exactly one of capacity=, stall=, warmup=");
      }
      if (kv.contains("for") && !kv.contains("capacity")) {
        return p.Error("for= goes only with capacity=");
      }
      if (kv.contains("capacity")) {
        e.kind = ScenarioEvent::Kind::kCapacity;
        SCENARIO_ASSIGN(e.capacity, p.Positive("capacity", kv["capacity"]));
        if (kv.contains("for")) {
          SCENARIO_ASSIGN(e.length, p.Duration("for", kv["for"]));
        }
      } else {
        const bool stall = kv.contains("stall");
        e.kind =
            stall ? ScenarioEvent::Kind::kStall : ScenarioEvent::Kind::kWarmup;
        const char* key = stall ? "stall" : "warmup";
        SCENARIO_ASSIGN(e.length, p.Duration(key, kv[key]));
      }
      if (e.length <= absl::ZeroDuration()) {
        return p.Error("an event's length must be > 0");
      }
      s.events.push_back(e);
    } else if (directive == "policies") {
      if (args.empty()) {
        return p.Error("policies takes at least one name");
      }
      s.policies.clear();
      for (absl::string_view a : args) {
        if (!IsPolicyWord(a)) {
          return p.Error(absl::StrCat("'", a, "' is not a policy name"));
        }
        s.policies.emplace_back(a);
      }
      have_policies = true;
    } else {
      return p.Error(absl::StrCat("unknown directive '", directive, "'"));
    }
  }
  const LineParser end(source, line_no);
  if (s.AggregateCapacity() <= 0) {
    return end.Error("no backend (other than sinkholes)");
  }
  if (!have_loads) {
    return end.Error("no loads");
  }
  if (!have_policies) {
    return end.Error("no policies");
  }
  for (const ScenarioEvent& e : s.events) {
    if (e.backend >= s.backends.size()) {
      return LineParser(source, e.line)
          .Error(absl::StrCat("an event names backend ", e.backend, " of ",
                              s.backends.size()));
    }
  }
  return s;
}

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseScenario(text.str(), path);
}

}  // namespace aside::bench
