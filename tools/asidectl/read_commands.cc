// The commands that only read (ctl.h): groups, group, targets, members,
// pick and watch. Tables by default, protobuf JSON with --json.
#include <iostream>
#include <optional>
#include <string>

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

int Ctl::Groups(const Args&) {
  v1::ListGroupsResponse out;
  auto ctx = Context();
  grpc::Status s = admin_->ListGroups(ctx.get(), {}, &out);
  if (!s.ok()) return Fail(s);
  if (json_) {
    std::cout << ToJson(out) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "SOURCE", "POLICY", "GENERATION", "READY", "PANIC"}};
  for (const v1::Group& g : out.groups()) {
    rows.push_back({g.name(), SourceText(g.source()), PolicyText(g.policy()),
                    absl::StrCat(g.generation()), absl::StrCat(g.ready_count()),
                    g.panic() ? "yes" : "no"});
  }
  PrintTable(rows);
  return 0;
}

int Ctl::GetGroup(const Args& a) {
  if (Missing(a, 1, "group name")) return kUsageError;
  v1::GetGroupRequest req;
  req.set_name(a[0]);
  v1::Group out;
  auto ctx = Context();
  grpc::Status s = admin_->GetGroup(ctx.get(), req, &out);
  if (!s.ok()) return Fail(s);
  return PrintGroup(out);
}

int Ctl::PrintGroup(const v1::Group& g) {
  if (json_) {
    std::cout << ToJson(g) << "\n";
    return 0;
  }
  PrintTable({{"group:", g.name()},
              {"source:", SourceText(g.source())},
              {"policy:", PolicyText(g.policy())},
              {"generation:", absl::StrCat(g.generation())},
              {"ready:", absl::StrCat(g.ready_count(), " of ", g.state_size())},
              {"panic:", g.panic() ? "yes" : "no"}});
  std::vector<std::vector<std::string>> rows = {
      {"ADDRESS", "WEIGHT", "EFFECTIVE", "READY", "HEALTH", "DRAINED",
       "LOCALITY", "METADATA"}};
  for (const v1::TableBackend& b : g.state()) {
    rows.push_back({b.backend().address(),
                    absl::StrCat(b.backend().has_weight() ? b.backend().weight()
                                                          : kDefaultWeight),
                    absl::StrCat(b.effective_weight()),
                    b.ready() ? "yes" : "no", HealthText(b.health()),
                    b.backend().drained() ? "yes" : "no",
                    LocalityText(b.backend().locality()),
                    MetadataText(b.backend().metadata())});
  }
  std::cout << "\n";
  PrintTable(rows);
  if (g.has_orca() && g.orca().enabled()) {
    // The backends' own reports (ORCA), which weights follow when the
    // group says weights: true.
    std::vector<std::vector<std::string>> orca = {
        {"ADDRESS", "ORCA", "UTIL", "QPS", "EPS", "REPORTED", "ERROR"}};
    for (const v1::TableBackend& b : g.state()) {
      const v1::OrcaView& o = b.orca();
      const bool reported = o.has_age();
      orca.push_back(
          {b.backend().address(), o.state().empty() ? "-" : o.state(),
           reported ? absl::StrFormat("%.2f", o.utilization()) : "-",
           reported ? absl::StrFormat("%.1f", o.qps()) : "-",
           reported ? absl::StrFormat("%.1f", o.eps()) : "-",
           reported ? absl::StrFormat("%.1fs ago",
                                      o.age().seconds() + o.age().nanos() / 1e9)
                    : "never",
           o.last_error().empty() ? "-" : o.last_error()});
    }
    std::cout << "\n";
    PrintTable(orca);
  }
  return 0;
}

int Ctl::Targets(const Args& a) {
  v1::ListTargetsRequest req;
  if (!a.empty()) req.set_group(a[0]);
  v1::ListTargetsResponse out;
  auto ctx = Context();
  grpc::Status s = admin_->ListTargets(ctx.get(), req, &out);
  if (!s.ok()) return Fail(s);
  if (json_) {
    std::cout << ToJson(out) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ADDRESS", "STATE", "PROBES", "LAST RESULT", "GROUPS"}};
  for (const v1::Target& t : out.targets()) {
    std::string last = "-";
    if (t.has_last_result()) {
      last = t.last_result().success() ? "ok" : "failed";
      if (!t.last_result().reason().empty()) {
        absl::StrAppend(&last, " (", t.last_result().reason(), ")");
      }
    }
    rows.push_back({t.address(), HealthText(t.state()),
                    absl::StrCat(t.probes()), last,
                    absl::StrJoin(t.groups(), ",")});
  }
  PrintTable(rows);
  if (out.has_store()) {
    const v1::StoreState& st = out.store();
    std::cout << "\nstore: " << st.type() << " (" << st.location() << ") "
              << (st.up() ? "up" : "DOWN");
    if (st.revision() > 0) std::cout << ", revision " << st.revision();
    if (!st.last_error().empty()) {
      std::cout << ", last error: " << st.last_error();
    }
    std::cout << "\n";
  }
  return 0;
}

// The fleet's live replicas (read role). "self" marks the one answering.
int Ctl::Members(const Args&) {
  v1::ListMembersResponse out;
  auto ctx = Context();
  grpc::Status s = admin_->ListMembers(ctx.get(), {}, &out);
  if (!s.ok()) return Fail(s);
  if (json_) {
    std::cout << ToJson(out) << "\n";
    return 0;
  }
  if (out.self_id().empty()) {
    std::cout << "no fleet: this server does not use the etcd store (each "
                 "replica probes every target)\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "ADDRESS", "TARGETS PROBED", "LEASE AGE", "STARTED", ""}};
  for (const v1::FleetMember& m : out.members()) {
    rows.push_back({m.id(), m.address(), absl::StrCat(m.targets_owned()),
                    absl::StrFormat("%.1fs", m.lease_age().seconds() +
                                                 m.lease_age().nanos() / 1e9),
                    m.start_time(), m.self() ? "self" : ""});
  }
  PrintTable(rows);
  if (!out.confirmed()) {
    std::cout << "\nthis replica's membership is not confirmed (etcd "
                 "unreachable or registering): it probes every target\n";
  }
  return 0;
}

int Ctl::PickCmd(const Args& a) {
  if (Missing(a, 1, "group name")) return kUsageError;
  v1::PickRequest req;
  req.set_group(a[0]);
  // A text key: what the stub's Pick(key) hashes for the same string.
  if (a.size() > 1) req.set_key(a[1]);
  if (std::optional<uint32_t> count = absl::GetFlag(FLAGS_count)) {
    req.set_count(*count);
  }
  v1::PickResponse out;
  auto ctx = Context();
  grpc::Status s = lb_->Pick(ctx.get(), req, &out);
  if (!s.ok()) return Fail(s);
  if (json_) {
    std::cout << ToJson(out) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ADDRESS", "WEIGHT", "LOCALITY", "METADATA"}};
  for (const v1::PickedBackend& b : out.backends()) {
    rows.push_back({b.address(), absl::StrCat(b.weight()),
                    LocalityText(b.locality()), MetadataText(b.metadata())});
  }
  PrintTable(rows);
  std::cout << "generation " << out.generation()
            << (out.panic() ? " (panic)" : "") << "\n";
  return 0;
}

int Ctl::Watch(const Args& a) {
  if (Missing(a, 1, "group name")) return kUsageError;
  v1::WatchRequest req;
  for (const std::string& g : a) req.add_groups(g);
  req.set_subscriber("asidectl");
  const int64_t limit = absl::GetFlag(FLAGS_updates).value_or(-1);
  auto ctx = Context(/*deadline=*/false);
  auto reader = lb_->Watch(ctx.get(), req);
  v1::GroupUpdate u;
  int64_t seen = 0;
  while (limit != 0 && reader->Read(&u)) {
    if (json_) {
      std::cout << ToJson(u, /*pretty=*/false) << std::endl;
    } else {
      std::string what;
      switch (u.update_case()) {
        case v1::GroupUpdate::kFull: {
          int ready = 0;
          for (const auto& b : u.full().backends()) ready += b.ready() ? 1 : 0;
          what =
              absl::StrCat("full policy=", PolicyText(u.full().policy()),
                           " backends=", u.full().backends_size(),
                           " ready=", ready, u.full().panic() ? " panic" : "");
          break;
        }
        case v1::GroupUpdate::kDelta:
          what = absl::StrCat("delta base=", u.delta().base_generation(),
                              " upserted=", u.delta().upserted_size(),
                              " removed=", u.delta().removed_size(),
                              u.delta().panic() ? " panic" : "");
          break;
        case v1::GroupUpdate::kRemoved:
          what = absl::StrCat("removed (", u.removed().reason(), ")");
          break;
        default:
          what = "empty";
      }
      std::cout << absl::FormatTime("%H:%M:%E3S", absl::Now(),
                                    absl::LocalTimeZone())
                << " " << u.group() << " generation=" << u.generation() << " "
                << what << std::endl;
      if (u.has_full() || u.has_delta()) {
        const auto& list =
            u.has_full() ? u.full().backends() : u.delta().upserted();
        for (const auto& b : list) {
          std::cout << "    " << b.backend().address()
                    << " weight=" << b.effective_weight()
                    << (b.ready() ? " ready" : " not-ready")
                    << (b.backend().drained() ? " drained" : "") << std::endl;
        }
        if (u.has_delta()) {
          for (const auto& r : u.delta().removed()) {
            std::cout << "    " << r << " removed" << std::endl;
          }
        }
      }
    }
    if (limit > 0 && ++seen >= limit) {
      ctx->TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (limit > 0 && seen >= limit) return 0;
  if (!s.ok()) return Fail(s);
  return 0;
}

}  // namespace aside::asidectl
