// asidectl: Aside from the command line, for people without grpcurl.
//
// Exit codes: 0 success, 1 the RPC failed (the gRPC status is printed),
// 2 usage errors (unknown command or flag, missing argument, unreadable
// file).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/credentials.h"
#include "client/xds_bootstrap.h"
#include "lib/command_line.h"
#include "lib/json.h"
#include "lib/policy_config.h"
#include "proto/convert.h"
#include "proto/yaml/group_yaml.h"

namespace aside {
namespace {

constexpr char kUsage[] = R"(usage: asidectl [flags] COMMAND [args]

commands:
  status                          the fleet at a glance: groups, then every
                                  backend with health, last probe, drain,
                                  ejection and load
  groups                          list groups
  group NAME                      show a group with its backends and their state
  targets [GROUP]                 list health-check targets (of one group)
  members                         list the fleet's live replicas (etcd store):
                                  id, address, targets probed, lease age
  pick GROUP [KEY] [--count N]    ask the server for a backend
  watch GROUP... [--updates N]    print weight-table updates as they arrive
  create-group FILE               create the group(s) in a JSON or YAML file
                                  (a Group, {"group": ...}, or {"groups": [...]})
  create-group NAME --backend ADDR[=WEIGHT]... [--policy P] [--health-check KIND]
  delete-group NAME
  add-backend GROUP ADDR[=WEIGHT]...
  remove-backend GROUP ADDR...
  drain GROUP ADDR...
  undrain GROUP ADDR...
  xds-bootstrap [--node-id ID] [--region R --zone Z --sub-zone S]
                [--tls-ca CA [--tls-cert CRT --tls-key KEY]]
                                  print a bootstrap for stock gRPC xDS clients
                                  (xds:///GROUP) that names --server

flags:
  --server HOST:PORT     Aside server (default $ASIDE_SERVER or localhost:50051)
  --token TOKEN          Admin bearer token (default $ASIDE_TOKEN)
  --token-file FILE      read the token from FILE (the first word of its first
                         non-comment line, as in a server token file; default
                         $ASIDE_TOKEN_FILE; `make run` writes
                         var/demo-admin-token)
  --tls                  use TLS (implied by the other --tls-* flags)
  --tls-ca FILE          CA certificate (PEM) to verify the server
  --tls-cert FILE        client certificate (PEM), with --tls-key, for mTLS
  --tls-key FILE         client key (PEM)
  --tls-server-name NAME name to verify the server certificate against
  --json                 print protobuf JSON instead of tables
  --timeout DURATION     per-call deadline (default 10s; watch has none)
  --watch                status, groups, group, targets: redraw every
                         --interval (default 2s) until Ctrl-C (or --updates N
                         redraws)
)";

}  // namespace
}  // namespace aside

// Global flags, and the flags of single commands (they may appear anywhere
// on the command line).
ABSL_FLAG(std::string, server, "",
          "Aside server (default $ASIDE_SERVER or localhost:50051)");
ABSL_FLAG(std::string, token, "", "Admin bearer token (default $ASIDE_TOKEN)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the Admin token (default $ASIDE_TOKEN_FILE)");
ABSL_FLAG(bool, tls, false, "use TLS (implied by the other --tls-* flags)");
ABSL_FLAG(std::string, tls_ca, "", "CA certificate (PEM) to verify the server");
ABSL_FLAG(std::string, tls_cert, "", "client certificate (PEM) for mTLS");
ABSL_FLAG(std::string, tls_key, "", "client key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to verify the server certificate against");
ABSL_FLAG(bool, json, false, "print protobuf JSON instead of tables");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "per-call deadline");
ABSL_FLAG(std::optional<uint32_t>, count, std::nullopt,
          "pick: how many distinct backends");
ABSL_FLAG(std::optional<int64_t>, updates, std::nullopt,
          "watch: stop after N updates; --watch: after N redraws");
ABSL_FLAG(bool, watch, false,
          "status, groups, group, targets: redraw until interrupted");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(2),
          "--watch: time between redraws");
ABSL_FLAG(std::vector<std::string>, backend, {},
          "create-group: ADDR[=WEIGHT], repeatable");
ABSL_FLAG(std::string, policy, "", "create-group: policy name");
ABSL_FLAG(std::string, health_check, "",
          "create-group: tcp, http, grpc or none");
ABSL_FLAG(std::string, node_id, "",
          "xds-bootstrap: the node id (default aside-xds-client)");
ABSL_FLAG(std::string, region, "", "xds-bootstrap: the client's region");
ABSL_FLAG(std::string, zone, "", "xds-bootstrap: the client's zone");
ABSL_FLAG(std::string, sub_zone, "", "xds-bootstrap: the client's sub-zone");

namespace aside {
namespace {

// Writes one message to stderr, always ending in exactly one newline (a
// message from elsewhere, such as a gRPC status, may or may not end in
// one), so that two messages never run together on one line.
void Say(absl::string_view message) {
  std::string line(message);
  while (!line.empty() && line.back() == '\n') {
    line.pop_back();
  }
  line.push_back('\n');
  std::cerr << line << std::flush;
}

// Reported as a usage error (exit code 2).
absl::Status Usage(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

std::string ToJson(const google::protobuf::Message& m, bool pretty = true) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = false;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  if (!pretty) {
    return out;
  }
  return out;
}

std::string PolicyText(const v1::Policy& p) {
  absl::StatusOr<PolicyConfig> c = FromProto("policy", p);
  return c.ok() ? std::string(c->name()) : "invalid";
}

std::string SourceText(v1::GroupSource s) {
  switch (s) {
    case v1::GROUP_SOURCE_FILE:
      return "file";
    case v1::GROUP_SOURCE_STORE:
      return "admin";
    default:
      return "-";
  }
}

std::string HealthText(v1::HealthState s) {
  switch (s) {
    case v1::HEALTH_STATE_HEALTHY:
      return "healthy";
    case v1::HEALTH_STATE_UNHEALTHY:
      return "unhealthy";
    case v1::HEALTH_STATE_UNKNOWN:
      return "unknown";
    default:
      return "-";
  }
}

std::string LocalityText(const v1::Locality& l) {
  if (l.region().empty() && l.zone().empty() && l.subzone().empty()) {
    return "-";
  }
  return FromProto(l).ToString();
}

std::string MetadataText(
    const google::protobuf::Map<std::string, std::string>& m) {
  if (m.empty()) {
    return "-";
  }
  std::map<std::string, std::string> sorted(m.begin(), m.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

// Prints rows as left-aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(widths[i] - row[i].size() + 2, ' ');
      }
    }
    std::cout << line << "\n";
  }
}

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, std::string token)
      : json_(absl::GetFlag(FLAGS_json)),
        token_(std::move(token)),
        admin_(v1::Admin::NewStub(channel)),
        lb_(v1::LoadBalancer::NewStub(channel)) {}

  int Run(const std::string& command, const std::vector<std::string>& a) {
    command_ = command;
    if (absl::GetFlag(FLAGS_watch)) {
      if (command != "status" && command != "groups" && command != "group" &&
          command != "targets") {
        return UsageFail(
            "--watch: only with status, groups, group or targets (watch "
            "streams updates by itself)");
      }
      return Redraw(command, a);
    }
    return RunOnce(command, a);
  }

  int RunOnce(const std::string& command, const std::vector<std::string>& a) {
    if (command == "status") return Status(a);
    if (command == "groups") return Groups(a);
    if (command == "group") return GetGroup(a);
    if (command == "targets") return Targets(a);
    if (command == "members") return Members(a);
    if (command == "pick") return PickCmd(a);
    if (command == "watch") return Watch(a);
    if (command == "create-group") return CreateGroup(a);
    if (command == "delete-group") return DeleteGroup(a);
    if (command == "add-backend") return AddBackends(a);
    if (command == "remove-backend") return RemoveBackends(a);
    if (command == "drain") return Drain(a, true);
    if (command == "undrain") return Drain(a, false);
    return UsageFail(absl::StrCat("unknown command '", command, "'"));
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) {
    auto c = std::make_unique<grpc::ClientContext>();
    if (deadline) {
      c->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    }
    if (!token_.empty()) {
      c->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    }
    return c;
  }

  int Fail(const grpc::Status& s) {
    std::cout << std::flush;
    Say(absl::StrCat(
        "asidectl: ", command_, ": ",
        absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
        ": ", s.error_message()));
    // A method the server does not have (as opposed to a feature inside a
    // method, whose message says what is missing).
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
        (s.error_message().empty() || command_ == "targets")) {
      Say(absl::StrCat("asidectl: this server does not implement ", command_,
                       " yet"));
    }
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && token_.empty()) {
      Say("asidectl: pass an Admin token with --token or ASIDE_TOKEN, or a "
          "token file with --token-file or ASIDE_TOKEN_FILE (make run writes "
          "var/demo-admin-token)");
    }
    return 1;
  }

  // Records a usage error; the command returns kUsage.
  static constexpr int kUsage = -2;
  int UsageFail(absl::string_view message) {
    usage_error_ = std::string(message);
    return kUsage;
  }
  bool Missing(const std::vector<std::string>& a, size_t min,
               const char* what) {
    if (a.size() < min) {
      usage_error_ = absl::StrCat("missing ", what);
      return true;
    }
    return false;
  }

  int PrintGroup(const v1::Group& g) {
    if (json_) {
      std::cout << ToJson(g) << "\n";
      return 0;
    }
    PrintTable(
        {{"group:", g.name()},
         {"source:", SourceText(g.source())},
         {"policy:", PolicyText(g.policy())},
         {"generation:", absl::StrCat(g.generation())},
         {"ready:", absl::StrCat(g.ready_count(), " of ", g.state_size())},
         {"panic:", g.panic() ? "yes" : "no"}});
    std::vector<std::vector<std::string>> rows = {
        {"ADDRESS", "WEIGHT", "EFFECTIVE", "READY", "HEALTH", "DRAINED",
         "LOCALITY", "METADATA"}};
    for (const v1::TableBackend& b : g.state()) {
      rows.push_back(
          {b.backend().address(),
           absl::StrCat(b.backend().has_weight() ? b.backend().weight()
                                                 : kDefaultWeight),
           absl::StrCat(b.effective_weight()), b.ready() ? "yes" : "no",
           HealthText(b.health()), b.backend().drained() ? "yes" : "no",
           LocalityText(b.backend().locality()),
           MetadataText(b.backend().metadata())});
    }
    std::cout << "\n";
    PrintTable(rows);
    return 0;
  }

  int Groups(const std::vector<std::string>&) {
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
                      absl::StrCat(g.generation()),
                      absl::StrCat(g.ready_count()), g.panic() ? "yes" : "no"});
    }
    PrintTable(rows);
    return 0;
  }

  int GetGroup(const std::vector<std::string>& a) {
    if (Missing(a, 1, "group name")) return kUsage;
    v1::GetGroupRequest req;
    req.set_name(a[0]);
    v1::Group out;
    auto ctx = Context();
    grpc::Status s = admin_->GetGroup(ctx.get(), req, &out);
    if (!s.ok()) return Fail(s);
    return PrintGroup(out);
  }

  int Targets(const std::vector<std::string>& a) {
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
  int Members(const std::vector<std::string>&) {
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

  int PickCmd(const std::vector<std::string>& a) {
    if (Missing(a, 1, "group name")) return kUsage;
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

  int Watch(const std::vector<std::string>& a) {
    if (Missing(a, 1, "group name")) return kUsage;
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
            for (const auto& b : u.full().backends())
              ready += b.ready() ? 1 : 0;
            what = absl::StrCat("full policy=", PolicyText(u.full().policy()),
                                " backends=", u.full().backends_size(),
                                " ready=", ready,
                                u.full().panic() ? " panic" : "");
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

  // --watch: runs `command` every --interval, each frame drawn over the
  // last on a terminal (cursor home, clear screen) and separated by a
  // header line otherwise. A failed call is shown in its frame and retried
  // at the next one. Ends on Ctrl-C or SIGTERM (exit 0, the signals are
  // blocked in Main and taken here) or after --updates N frames (exit code
  // of the last frame).
  int Redraw(const std::string& command, const std::vector<std::string>& a) {
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
      if (rc < 0 || (limit > 0 && frame >= limit)) {
        return rc;
      }
      const timespec wait = absl::ToTimespec(interval);
      if (sigtimedwait(&stop, nullptr, &wait) >= 0) {
        return 0;  // interrupted: a clean end of watching
      }
    }
  }

  // The fleet at a glance, from the Admin API (read role): one row per
  // group, then one per backend with its health, last probe, state and
  // load.
  int Status(const std::vector<std::string>& a) {
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
      rows.push_back({g.name(), PolicyText(g.policy()),
                      absl::StrCat(g.generation()),
                      absl::StrCat(g.ready_count(), "/", g.state_size()),
                      g.panic() ? "PANIC" : "no",
                      absl::StrCat(g.client_stats().streams())});
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

  static absl::StatusOr<v1::Backend> ParseBackend(const std::string& spec) {
    v1::Backend b;
    std::vector<std::string> parts =
        absl::StrSplit(spec, absl::MaxSplits('=', 1));
    b.set_address(parts[0]);
    if (parts.size() == 2) {
      uint32_t w = 0;
      if (!absl::SimpleAtoi(parts[1], &w)) {
        return Usage(
            absl::StrCat("backend '", spec, "': weight is not a number"));
      }
      b.set_weight(w);
    }
    return b;
  }

  int CreateOne(const v1::Group& group) {
    v1::CreateGroupRequest req;
    *req.mutable_group() = group;
    v1::Group out;
    auto ctx = Context();
    grpc::Status s = admin_->CreateGroup(ctx.get(), req, &out);
    if (!s.ok()) return Fail(s);
    if (json_) {
      std::cout << ToJson(out) << "\n";
    } else {
      std::cout << "created group " << out.name() << " (generation "
                << out.generation() << ", " << out.state_size()
                << " backends)\n";
    }
    return 0;
  }

  int CreateGroup(const std::vector<std::string>& a) {
    if (Missing(a, 1, "group name or file")) return kUsage;
    const bool from_file =
        absl::EndsWith(a[0], ".json") || absl::EndsWith(a[0], ".yaml") ||
        absl::EndsWith(a[0], ".yml") || a[0].find('/') != std::string::npos;
    if (!from_file) {
      v1::Group g;
      g.set_name(a[0]);
      for (const std::string& b : absl::GetFlag(FLAGS_backend)) {
        absl::StatusOr<v1::Backend> backend = ParseBackend(b);
        if (!backend.ok()) return UsageFail(backend.status().message());
        *g.add_backends() = *std::move(backend);
      }
      if (const std::string policy = absl::GetFlag(FLAGS_policy);
          !policy.empty()) {
        absl::StatusOr<PolicyKind> kind = ParsePolicyName(policy);
        if (!kind.ok()) {
          return UsageFail(absl::StrCat("--policy: ", kind.status().message()));
        }
        PolicyConfig c;
        c.kind = *kind;
        ToProto(c, g.mutable_policy());
      }
      if (const std::string check = absl::GetFlag(FLAGS_health_check);
          !check.empty()) {
        v1::HealthCheck::Kind kind;
        if (!v1::HealthCheck::Kind_Parse(absl::AsciiStrToUpper(check), &kind)) {
          return UsageFail("--health-check: one of tcp, http, grpc, none");
        }
        g.mutable_health_check()->set_kind(kind);
      }
      return CreateOne(g);
    }
    absl::StatusOr<std::vector<v1::Group>> groups = LoadGroups(a[0]);
    if (!groups.ok()) return UsageFail(groups.status().message());
    for (const v1::Group& g : *groups) {
      if (int rc = CreateOne(g); rc != 0) return rc;
    }
    return 0;
  }

  // The group file in the config file's shorthand (YAML or JSON) or in
  // protobuf JSON, through the converter the server's config loader uses.
  static absl::StatusOr<std::vector<v1::Group>> LoadGroups(
      const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Usage(absl::StrCat(path, ": cannot open file"));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<v1::Group>> groups =
        yaml::GroupsFromText(text.str(), path);
    if (!groups.ok()) return Usage(groups.status().message());
    return groups;
  }

  int DeleteGroup(const std::vector<std::string>& a) {
    if (Missing(a, 1, "group name")) return kUsage;
    v1::DeleteGroupRequest req;
    req.set_name(a[0]);
    v1::DeleteGroupResponse out;
    auto ctx = Context();
    grpc::Status s = admin_->DeleteGroup(ctx.get(), req, &out);
    if (!s.ok()) return Fail(s);
    if (json_) {
      std::cout << ToJson(out) << "\n";
    } else {
      std::cout << "deleted group " << a[0] << " (generation "
                << out.generation() << ")\n";
    }
    return 0;
  }

  int Changed(const grpc::Status& s, const v1::Group& out,
              const std::string& what) {
    if (!s.ok()) return Fail(s);
    if (json_) {
      std::cout << ToJson(out) << "\n";
    } else {
      std::cout << what << " (group " << out.name() << ", generation "
                << out.generation() << ")\n";
    }
    return 0;
  }

  int AddBackends(const std::vector<std::string>& a) {
    if (Missing(a, 2, "group name and backend address")) return kUsage;
    v1::AddBackendsRequest req;
    req.set_group(a[0]);
    for (size_t i = 1; i < a.size(); ++i) {
      absl::StatusOr<v1::Backend> backend = ParseBackend(a[i]);
      if (!backend.ok()) return UsageFail(backend.status().message());
      *req.add_backends() = *std::move(backend);
    }
    v1::Group out;
    auto ctx = Context();
    return Changed(admin_->AddBackends(ctx.get(), req, &out), out,
                   absl::StrCat("added ", a.size() - 1, " backend(s)"));
  }

  int RemoveBackends(const std::vector<std::string>& a) {
    if (Missing(a, 2, "group name and backend address")) return kUsage;
    v1::RemoveBackendsRequest req;
    req.set_group(a[0]);
    for (size_t i = 1; i < a.size(); ++i) req.add_addresses(a[i]);
    v1::Group out;
    auto ctx = Context();
    return Changed(admin_->RemoveBackends(ctx.get(), req, &out), out,
                   absl::StrCat("removed ", a.size() - 1, " backend(s)"));
  }

  int Drain(const std::vector<std::string>& a, bool drained) {
    if (Missing(a, 2, "group name and backend address")) return kUsage;
    v1::DrainBackendsRequest req;
    req.set_group(a[0]);
    req.set_drained(drained);
    for (size_t i = 1; i < a.size(); ++i) req.add_addresses(a[i]);
    v1::Group out;
    auto ctx = Context();
    return Changed(admin_->DrainBackends(ctx.get(), req, &out), out,
                   absl::StrCat(drained ? "drained " : "undrained ",
                                a.size() - 1, " backend(s)"));
  }

  const bool json_;
  const absl::Duration timeout_ = absl::GetFlag(FLAGS_timeout);
  std::string usage_error_;

 public:
  const std::string& usage_error() const { return usage_error_; }

 private:
  std::string token_;
  std::string command_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_;
};

// The Admin token: --token, else $ASIDE_TOKEN, else the first token of
// --token-file or $ASIDE_TOKEN_FILE; empty when none is given.
absl::StatusOr<std::string> AdminToken() {
  if (std::string token = absl::GetFlag(FLAGS_token); !token.empty()) {
    return token;
  }
  if (const char* env = std::getenv("ASIDE_TOKEN");
      env != nullptr && *env != '\0') {
    return std::string(env);
  }
  std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) {
    const char* env = std::getenv("ASIDE_TOKEN_FILE");
    path = env != nullptr ? env : "";
  }
  if (path.empty()) {
    return std::string();
  }
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("--token-file: ", path, ": cannot open"));
  }
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') {
      continue;
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    return std::string(words[0]);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("--token-file: ", path, ": no token in it"));
}

int Main(int argc, char** argv) {
  absl::StatusOr<std::vector<std::string>> positional =
      ParseCommandLine(argc, argv, {.usage = kUsage, .positional = true});
  if (!positional.ok()) {
    Say(absl::StrCat("asidectl: ", positional.status().message(), "\n\n",
                     kUsage));
    return 2;
  }
  if (positional->empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) {
    const char* env = std::getenv("ASIDE_SERVER");
    server = env != nullptr && *env != '\0' ? env : "localhost:50051";
  }
  if ((*positional)[0] == "xds-bootstrap") {
    // --tls-ca/--tls-cert/--tls-key name the files the client will read.
    XdsBootstrapOptions options{.server = server,
                                .region = absl::GetFlag(FLAGS_region),
                                .zone = absl::GetFlag(FLAGS_zone),
                                .sub_zone = absl::GetFlag(FLAGS_sub_zone),
                                .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
                                .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
                                .tls_key_file = absl::GetFlag(FLAGS_tls_key)};
    if (!absl::GetFlag(FLAGS_node_id).empty()) {
      options.node_id = absl::GetFlag(FLAGS_node_id);
    }
    absl::StatusOr<std::string> json = XdsBootstrapJson(options);
    if (!json.ok()) {
      Say(absl::StrCat("asidectl: xds-bootstrap: ", json.status().message()));
      return 2;
    }
    std::cout << *json << (absl::EndsWith(*json, "\n") ? "" : "\n");
    return 0;
  }
  TlsOptions tls;
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  tls.enabled = absl::GetFlag(FLAGS_tls) || !tls.ca_file.empty() ||
                !tls.cert_file.empty() || !tls.key_file.empty() ||
                !tls.server_name.empty();
  if (absl::GetFlag(FLAGS_interval) < absl::Milliseconds(100)) {
    Say("asidectl: --interval: at least 100ms");
    return 2;
  }
  // --watch waits for Ctrl-C (and SIGTERM) with sigtimedwait between
  // redraws: block them before gRPC starts its threads, so that none of
  // those takes the signal and the process ends through Redraw's return.
  if (absl::GetFlag(FLAGS_watch)) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  }
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    Say("asidectl: --timeout: must be positive");
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeCredentials(tls);
  if (!creds.ok()) {
    Say(absl::StrCat("asidectl: ", creds.status().message()));
    return 2;
  }
  grpc::ChannelArguments channel_args;
  ApplyTlsArgs(tls, &channel_args);
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(server, *creds, channel_args);
  absl::StatusOr<std::string> token = AdminToken();
  if (!token.ok()) {
    Say(absl::StrCat("asidectl: ", token.status().message()));
    return 2;
  }
  Ctl ctl(channel, *std::move(token));
  const std::string command = (*positional)[0];
  std::vector<std::string> rest(positional->begin() + 1, positional->end());
  const int rc = ctl.Run(command, rest);
  if (rc < 0) {
    Say(absl::StrCat("asidectl: ", command, ": ", ctl.usage_error(), "\n\n",
                     kUsage));
    return 2;
  }
  return rc;
}

}  // namespace
}  // namespace aside

int main(int argc, char** argv) { return aside::Main(argc, argv); }
