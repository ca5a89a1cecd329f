// arena_sim: runs balancing scenarios (bench/scenario) in the deterministic
// simulator (sim.h) for every policy and load step, and prints each figure
// as a ratio to the perfect-information limit of the same run.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/scenario/scenario.h"
#include "bench/sim/sim.h"
#include "lib/command_line.h"

ABSL_FLAG(std::vector<std::string>, scenario, {},
          "scenario files (default: bench/scenario/default.scn)");
ABSL_FLAG(std::vector<std::string>, policies, {},
          "policies to run instead of the scenario's");
ABSL_FLAG(std::vector<std::string>, loads, {},
          "load steps instead of the scenario's");
ABSL_FLAG(std::string, duration, "", "measured time per step instead");
ABSL_FLAG(std::string, json, "", "also write the figures to this file");
ABSL_FLAG(bool, smoke, false,
          "a short run of the default scenario at one load step");

namespace aside::bench {
namespace {

constexpr absl::string_view kUsage =
    "usage: arena_sim [--scenario=FILE,...] [--policies=a,b] [--loads=0.9]\n"
    "                 [--duration=5s] [--json=FILE] [--smoke]\n";

struct Run {
  std::string scenario;
  StepResult r;
  StepResult limit;
};

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Fixed(double v, int digits) {
  return absl::StrFormat("%.*f", digits, v);
}

void PrintTable(const Scenario& s, const std::vector<Run>& runs,
                const std::map<std::string, double>& sustainable) {
  std::printf(
      "\n%s: %zu backends, %u clients, %.0f calls/s at 1.0, mean call %.2f "
      "ms, deadline %s\n",
      s.source.c_str(), s.backends.size(), s.clients, s.AggregateCapacity(),
      absl::ToDoubleMilliseconds(s.MeanCallTime()),
      absl::FormatDuration(s.deadline).c_str());
  std::printf(
      "| policy | load | p50 | p99 | p99.9 | errors | max RIF | max share | "
      "recovery | recovered share | sinkhole | msgs/call | same backend | "
      "sustainable |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Run& run : runs) {
    const StepResult& r = run.r;
    const bool limit = r.policy == "limit";
    auto ratio = [&](double a, double b) {
      return limit ? absl::StrFormat("%.2f ms", a)
                   : absl::StrFormat("%.2f×", Ratio(a, b));
    };
    std::printf(
        "| %s | %.2f | %s | %s | %s | %s %% | %u | %s | %s | %s | %s %% | %s "
        "| %s %% | %s |\n",
        r.policy.c_str(), r.load, ratio(r.p50_ms, run.limit.p50_ms).c_str(),
        ratio(r.p99_ms, run.limit.p99_ms).c_str(),
        ratio(r.p999_ms, run.limit.p999_ms).c_str(),
        Fixed(100 * r.errors, 2).c_str(), r.max_rif,
        Fixed(r.max_share, 2).c_str(),
        r.recovery_s < 0 ? "never" : (Fixed(r.recovery_s, 2) + " s").c_str(),
        Fixed(r.recovered_share, 2).c_str(), Fixed(100 * r.sinkhole, 3).c_str(),
        Fixed(r.extra_messages, 3).c_str(),
        Fixed(100 * r.same_backend, 1).c_str(),
        Fixed(sustainable.at(r.policy), 2).c_str());
  }
}

std::string Json(
    const std::vector<Run>& runs,
    const std::map<std::string, std::map<std::string, double>>& sustainable) {
  std::string out = "[\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const StepResult& r = runs[i].r;
    absl::StrAppendFormat(
        &out,
        "  {\"scenario\": \"%s\", \"policy\": \"%s\", \"load\": %g, "
        "\"calls\": %u, \"p50_ms\": %.4f, \"p99_ms\": %.4f, \"p999_ms\": "
        "%.4f, \"p99_vs_limit\": %.4f, \"p999_vs_limit\": %.4f, \"errors\": "
        "%.6f, \"timeouts\": %.6f, \"max_rif\": %u, \"max_share\": %.4f, "
        "\"recovery_s\": %.3f, \"recovered_share\": %.4f, \"sinkhole\": %.6f, "
        "\"extra_messages\": %.5f, \"same_backend\": %.4f, "
        "\"sustainable_vs_limit\": %.3f}%s\n",
        runs[i].scenario, r.policy, r.load, r.calls, r.p50_ms, r.p99_ms,
        r.p999_ms, Ratio(r.p99_ms, runs[i].limit.p99_ms),
        Ratio(r.p999_ms, runs[i].limit.p999_ms), r.errors, r.timeouts,
        r.max_rif, r.max_share, r.recovery_s, r.recovered_share, r.sinkhole,
        r.extra_messages, r.same_backend,
        sustainable.at(runs[i].scenario).at(r.policy),
        i + 1 < runs.size() ? "," : "");
  }
  out += "]\n";
  return out;
}

int Main(int argc, char** argv) {
  absl::StatusOr<std::vector<std::string>> args =
      ParseCommandLine(argc, argv, {.usage = kUsage});
  if (!args.ok()) {
    std::fprintf(stderr, "arena_sim: %s\n%s",
                 std::string(args.status().message()).c_str(),
                 std::string(kUsage).c_str());
    return 2;
  }
  const bool smoke = absl::GetFlag(FLAGS_smoke);
  std::vector<std::string> files = absl::GetFlag(FLAGS_scenario);
  if (files.empty()) {
    files.push_back(std::string(ASIDE_SOURCE_DIR) +
                    "/bench/scenario/default.scn");
  }
  std::vector<Run> all;
  std::map<std::string, std::map<std::string, double>> all_sustainable;
  for (const std::string& file : files) {
    absl::StatusOr<Scenario> loaded = LoadScenario(file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "arena_sim: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 2;
    }
    Scenario s = *std::move(loaded);
    if (!absl::GetFlag(FLAGS_policies).empty()) {
      s.policies = absl::GetFlag(FLAGS_policies);
    }
    if (!absl::GetFlag(FLAGS_loads).empty()) {
      s.loads.clear();
      for (const std::string& l : absl::GetFlag(FLAGS_loads)) {
        double v = 0;
        if (!absl::SimpleAtod(l, &v) || v <= 0) {
          std::fprintf(stderr, "arena_sim: --loads: '%s'\n", l.c_str());
          return 2;
        }
        s.loads.push_back(v);
      }
    }
    if (!absl::GetFlag(FLAGS_duration).empty()) {
      if (!absl::ParseDuration(absl::GetFlag(FLAGS_duration), &s.duration) ||
          s.duration <= absl::ZeroDuration()) {
        std::fprintf(stderr, "arena_sim: --duration\n");
        return 2;
      }
    }
    if (smoke) {
      s.duration = absl::Seconds(3);
      s.warmup = absl::Seconds(1);
      s.loads = {0.9};
      for (ScenarioEvent& e : s.events) {
        // Keep the schedule inside the short step.
        e.at = e.at * 3 / 20;
        if (e.length != absl::InfiniteDuration() &&
            e.kind == ScenarioEvent::Kind::kCapacity) {
          e.length = e.length * 3 / 20;
        }
      }
    }
    std::vector<std::string> policies = {"limit"};
    for (const std::string& p : s.policies) {
      if (p != "limit") {
        policies.push_back(p);
      }
    }
    std::map<double, StepResult> limits;
    std::vector<Run> runs;
    std::map<std::string, double> highest;
    const double p99_bound_ms =
        5 * absl::ToDoubleMilliseconds(s.MeanCallTime());
    for (const std::string& p : policies) {
      const absl::Time start = absl::Now();
      highest[p] = 0;
      for (double load : s.loads) {
        absl::StatusOr<StepResult> r = RunStep(s, p, load);
        if (!r.ok()) {
          if (absl::IsUnimplemented(r.status())) {
            std::fprintf(stderr, "arena_sim: %s skipped: %s\n", p.c_str(),
                         std::string(r.status().message()).c_str());
            break;
          }
          std::fprintf(stderr, "arena_sim: %s at %.2f: %s\n", p.c_str(), load,
                       std::string(r.status().message()).c_str());
          return 1;
        }
        if (p == "limit") {
          limits[load] = *r;
        }
        if (r->p99_ms <= p99_bound_ms) {
          highest[p] = std::max(highest[p], load);
        }
        runs.push_back(Run{file, *r, limits[load]});
      }
      std::fprintf(stderr, "arena_sim: %s: %s in %.1f s\n", file.c_str(),
                   p.c_str(), absl::ToDoubleSeconds(absl::Now() - start));
    }
    std::map<std::string, double> sustainable;
    for (const auto& [p, load] : highest) {
      sustainable[p] = Ratio(load, highest["limit"]);
    }
    PrintTable(s, runs, sustainable);
    all_sustainable[file] = sustainable;
    all.insert(all.end(), runs.begin(), runs.end());
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << Json(all, all_sustainable);
    if (!out) {
      std::fprintf(stderr, "arena_sim: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace aside::bench

int main(int argc, char** argv) { return aside::bench::Main(argc, argv); }
