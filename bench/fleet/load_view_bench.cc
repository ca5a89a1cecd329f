// The fleet's shared load view at 100 groups x 100 backends (bench/README.md,
// "Fleet load view"): what one LoadView stream carries per second from one
// replica to one peer, and what producing and merging it costs.
//
// In process, on a fake clock: a publisher's LoadAggregator takes one
// cumulative report per backend per second from `--sources` credentials;
// each second the publisher exports, diffs against the export it last
// sent (exactly what a stream sends, load_view_codec.h) and a subscriber
// decodes and merges the update into its own aggregator. The message
// sizes are the protobuf bytes the stream writes (gRPC adds 5 bytes a
// message). Three cases: every entry changes each second, a tenth of them
// do, and nothing is reported (heartbeats only).
//
// Prints one JSON object.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/command_line.h"
#include "server/load/load_aggregator.h"
#include "server/load/load_view_codec.h"

ABSL_FLAG(int, groups, 100, "groups");
ABSL_FLAG(int, backends, 100, "backends per group");
ABSL_FLAG(int, sources, 1, "credentials reporting each backend");
ABSL_FLAG(int, seconds, 10, "measured seconds per case");
ABSL_FLAG(int, replicas, 6, "replicas, for the fleet-wide totals");

namespace aside::server {
namespace {

double CpuSeconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

struct Case {
  double bytes_per_second = 0;
  double entries_per_second = 0;
  double publish_cpu_share = 0;    // export + diff, per second of time
  double subscribe_cpu_share = 0;  // decode + merge
};

std::string Backend(int b) {
  return absl::StrCat("10.", b / 250, ".", b % 250, ".1:8080");
}

}  // namespace

int Run() {
  const int groups = absl::GetFlag(FLAGS_groups);
  const int backends = absl::GetFlag(FLAGS_backends);
  const int sources = absl::GetFlag(FLAGS_sources);
  const int seconds = absl::GetFlag(FLAGS_seconds);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  FakeClock clock;
  auto all = [](const std::string&, const std::string&) { return true; };
  LoadAggregator publisher(&clock, absl::Seconds(10), all, 0.25);
  LoadAggregator subscriber(&clock, absl::Seconds(10), all, 0.25);
  ExportIds ids;
  LoadViewDecoder decoder;
  std::shared_ptr<const ExportedLoads> sent;
  uint64_t tick = 0;
  size_t snapshot_bytes = 0;

  // One second: reports for the `every`-th backends, then one update.
  auto second = [&](int every, Case* c) {
    ++tick;
    for (int g = 0; g < groups; ++g) {
      for (int b = 0; b < backends; ++b) {
        if (every == 0 || (g * backends + b) % every != 0) {
          continue;
        }
        for (int s = 0; s < sources; ++s) {
          LoadObservation o;
          o.source = absl::StrCat("team-", s);
          o.group = absl::StrCat("group-", g);
          o.address = Backend(b);
          o.requests = tick * 250;
          o.failures = tick;
          o.latency_sum_nanos = static_cast<int64_t>(tick) * 250 * 4'000'000;
          o.in_flight = tick % 7;
          (void)publisher.Add(absl::StrCat("pod-", s), o);
        }
      }
    }
    clock.Advance(absl::Seconds(1));
    const double t0 = CpuSeconds();
    std::shared_ptr<const ExportedLoads> next =
        ids.Next(publisher.ExportLocal());
    v1::LoadViewUpdate update = DiffExports(sent.get(), *next);
    sent = next;
    const double t1 = CpuSeconds();
    std::vector<std::string> rejected;
    std::vector<int> index;
    subscriber.ApplyPeer("publisher",
                         decoder.Decode(update, &rejected, &index));
    const double t2 = CpuSeconds();
    if (update.snapshot()) {
      snapshot_bytes = update.ByteSizeLong();
    }
    if (c != nullptr) {
      c->bytes_per_second += static_cast<double>(update.ByteSizeLong());
      c->entries_per_second += update.loads_size();
      c->publish_cpu_share += t1 - t0;
      c->subscribe_cpu_share += t2 - t1;
    }
  };
  // Warm up: baselines, then a day's worth of counts at once, so that the
  // counters are as large as a day of uptime leaves them (varints grow).
  second(1, nullptr);
  tick = 86'400;
  second(1, nullptr);
  second(1, nullptr);
  auto measure = [&](int every) {
    Case c;
    for (int i = 0; i < seconds; ++i) {
      second(every, &c);
    }
    c.bytes_per_second /= seconds;
    c.entries_per_second /= seconds;
    c.publish_cpu_share /= seconds;
    c.subscribe_cpu_share /= seconds;
    return c;
  };
  const Case all_change = measure(1);
  const Case tenth = measure(10);
  // Quiet past the window: every source has gone, only heartbeats remain.
  for (int i = 0; i < 11; ++i) {
    second(0, nullptr);
  }
  const Case idle = measure(0);
  auto json = [](const char* name, const Case& c) {
    return absl::StrCat(
        "\"", name, "\": {\"bytes_per_second_per_peer\": ",
        static_cast<int64_t>(c.bytes_per_second), ", \"entries_per_second\": ",
        static_cast<int64_t>(c.entries_per_second), ", \"bytes_per_entry\": ",
        c.entries_per_second > 0 ? c.bytes_per_second / c.entries_per_second
                                 : 0.0,
        ", \"publisher_cpu_share_per_peer\": ", c.publish_cpu_share,
        ", \"subscriber_cpu_share_per_peer\": ", c.subscribe_cpu_share, "}");
  };
  const double fleet = all_change.bytes_per_second * replicas * (replicas - 1);
  std::printf(
      "{\"groups\": %d, \"backends_per_group\": %d, \"sources\": %d, "
      "\"entries\": %d, \"snapshot_bytes\": %zu, %s, %s, %s, "
      "\"fleet_bytes_per_second_all_changing\": %.0f, \"replicas\": %d}\n",
      groups, backends, sources, groups * backends * sources, snapshot_bytes,
      json("all_changing", all_change).c_str(),
      json("tenth_changing", tenth).c_str(), json("idle", idle).c_str(), fleet,
      replicas);
  return 0;
}

}  // namespace aside::server

int main(int argc, char** argv) {
  if (auto args = aside::ParseCommandLine(
          argc, argv,
          {.usage = "load_view_bench [--groups N] [--backends N] "
                    "[--sources N] [--seconds N] [--replicas N]"});
      !args.ok()) {
    std::fprintf(stderr, "load_view_bench: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  return aside::server::Run();
}
