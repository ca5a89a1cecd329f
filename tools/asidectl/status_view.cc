// The fleet at a glance (ctl.h): `status`, one row per group and then one
// per backend with health, last probe, drain, ejection and load; and
// --watch, which redraws status, groups, group or targets like watch(1).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "tools/asidectl/ctl.h"
#include "tools/asidectl/flags.h"
#include "tools/asidectl/format.h"

namespace aside::asidectl {

// The fleet at a glance, from the Admin API (read role): one row per
// group, then one per backend with its health, last probe, state and
// load.
int Ctl::Status(const Args& a) {
  v1::ListGroupsResponse list;
  {
    auto ctx = Context();
    grpc::Status s = admin_->ListGroups(ctx.get(), {}, &list);
    if (!s.ok()) return Fail(s);
  }
  std::vector<v1::Group> groups;
  for (const v1::Group& g : list.groups()) {
    if (!a.empty() && std::find(a.begin(), a.end(), g.name()) == a.end()) {
      continue;
    }
    v1::GetGroupRequest req;
    req.set_name(g.name());
    v1::Group out;
    auto ctx = Context();
    grpc::Status s = admin_->GetGroup(ctx.get(), req, &out);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) continue;  // gone
    if (!s.ok()) return Fail(s);
    groups.push_back(std::move(out));
  }
  v1::ListTargetsResponse targets;
  {
    auto ctx = Context();
    grpc::Status s = admin_->ListTargets(ctx.get(), {}, &targets);
    if (!s.ok() && s.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
      return Fail(s);
    }
  }
  v1::ListMembersResponse members;
  {
    // Optional: a server without the method, or without a fleet.
    auto ctx = Context();
    if (!admin_->ListMembers(ctx.get(), {}, &members).ok()) {
      members.Clear();
    }
  }
  if (json_) {
    v1::ListGroupsResponse all;
    for (const v1::Group& g : groups) *all.add_groups() = g;
    std::cout << "{\"groups\": " << ToJson(all, false)
              << ", \"targets\": " << ToJson(targets, false)
              << ", \"members\": " << ToJson(members, false) << "}\n";
    return 0;
  }
  if (!members.self_id().empty()) {
    std::cout << "fleet: " << members.members_size() << " members, self "
              << members.self_id()
              << (members.confirmed() ? "" : " (not confirmed)") << "\n";
  }
  // Probe results and ejections by (group, address).
  std::map<std::pair<std::string, std::string>, const v1::Target*> probes;
  for (const v1::Target& t : targets.targets()) {
    for (const std::string& g : t.groups()) {
      probes[{g, t.address()}] = &t;
    }
  }
  int backends = 0;
  int ready = 0;
  std::vector<std::vector<std::string>> rows = {
      {"GROUP", "POLICY", "GENERATION", "READY", "PANIC", "GRPCLB"}};
  for (const v1::Group& g : groups) {
    backends += g.state_size();
    ready += static_cast<int>(g.ready_count());
    rows.push_back(
        {g.name(), PolicyText(g.policy()), absl::StrCat(g.generation()),
         absl::StrCat(g.ready_count(), "/", g.state_size()),
         g.panic() ? "PANIC" : "no", absl::StrCat(g.client_stats().streams())});
  }
  std::cout << groups.size() << " groups, " << ready << "/" << backends
            << " backends ready, " << targets.targets_size()
            << " health targets\n\n";
  PrintTable(rows);
  rows = {{"GROUP", "BACKEND", "WEIGHT", "HEALTH", "LAST PROBE", "STATE",
           "IN FLIGHT", "REQ/S", "ERR/S", "LATENCY"}};
  for (const v1::Group& g : groups) {
    for (const v1::TableBackend& b : g.state()) {
      const std::string& address = b.backend().address();
      const uint32_t weight =
          b.backend().has_weight() ? b.backend().weight() : kDefaultWeight;
      std::string probe = "-";
      std::string state = b.ready() ? "ready" : "not ready";
      if (b.backend().drained() || weight == 0) state = "drained";
      if (auto it = probes.find({g.name(), address}); it != probes.end()) {
        const v1::Target& t = *it->second;
        if (t.has_last_result()) {
          const v1::ProbeResult& r = t.last_result();
          probe = absl::StrCat(
              r.success() ? "ok " : "failed ",
              absl::StrFormat("%.1fms", r.latency().seconds() * 1e3 +
                                            r.latency().nanos() / 1e6));
          if (!r.success() && !r.reason().empty()) {
            absl::StrAppend(&probe, " (", r.reason(), ")");
          }
        }
        for (const v1::Ejection& e : t.ejections()) {
          if (e.group() == g.name()) {
            state = absl::StrCat("ejected x", e.count());
          }
        }
      }
      const v1::LoadView& l = b.load();
      const bool has_load = b.has_load();
      rows.push_back(
          {g.name(), address,
           b.effective_weight() == weight
               ? absl::StrCat(weight)
               : absl::StrCat(b.effective_weight(), "/", weight),
           HealthText(b.health()), probe, state,
           has_load ? absl::StrCat(l.in_flight()) : "-",
           has_load ? absl::StrFormat("%.1f", l.requests_per_second()) : "-",
           has_load ? absl::StrFormat(
                          "%.1f", l.requests_per_second() * l.failure_ratio())
                    : "-",
           has_load
               ? absl::StrFormat("%.1fms", l.mean_latency().seconds() * 1e3 +
                                               l.mean_latency().nanos() / 1e6)
               : "-"});
    }
  }
  std::cout << "\n";
  PrintTable(rows);
  return 0;
}

// --watch: runs `command` every --interval, each frame drawn over the
// last on a terminal (cursor home, clear screen) and separated by a
// header line otherwise. A failed call is shown in its frame and retried
// at the next one. Ends on Ctrl-C or SIGTERM (exit 0, the signals are
// blocked in Main and taken here) or after --updates N frames (exit code
// of the last frame).
int Ctl::Redraw(const std::string& command, const Args& a) {
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  const int64_t limit = absl::GetFlag(FLAGS_updates).value_or(-1);
  const bool tty = isatty(STDOUT_FILENO) == 1;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  int rc = 0;
  for (int64_t frame = 1;; ++frame) {
    if (tty) {
      std::cout << "\x1b[H\x1b[2J";
    } else if (frame > 1) {
      std::cout << "\n";
    }
    std::cout << "Every " << absl::FormatDuration(interval) << ": asidectl "
              << command << (a.empty() ? "" : " ") << absl::StrJoin(a, " ")
              << "  "
              << absl::FormatTime("%H:%M:%S", absl::Now(),
                                  absl::LocalTimeZone())
              << "\n\n";
    rc = RunOnce(command, a);
    std::cout << std::flush;
    if (rc == kUsageError || (limit > 0 && frame >= limit)) {
      return rc;
    }
    const timespec wait = absl::ToTimespec(interval);
    if (sigtimedwait(&stop, nullptr, &wait) >= 0) {
      return 0;  // interrupted: a clean end of watching
    }
  }
}

}  // namespace aside::asidectl
