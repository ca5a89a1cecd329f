// The commands that change groups (ctl.h): create-group from flags or from
// a group file (the config file's shorthand in YAML or JSON, or protobuf
// JSON), delete-group, add-backend, remove-backend, drain and undrain, and
// apply-changes from a file of many changes (ApplyGroupChanges).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "lib/address.h"
#include "lib/json.h"
#include "lib/policy_config.h"
#include "proto/convert.h"
#include "proto/yaml/group_yaml.h"
#include "proto/yaml/yaml_reader.h"
#include "tools/asidectl/ctl.h"
#include "tools/asidectl/flags.h"
#include "tools/asidectl/format.h"

namespace aside::asidectl {
namespace {

// Reported as a usage error (exit code 2).
absl::Status Usage(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// A YAML tree as JSON text: plain scalars that read as numbers, booleans or
// null stay bare, every other scalar is a string. JSON is YAML, so a JSON
// file comes out as it went in.
void AppendYamlAsJson(const YAML::Node& node, std::string* out) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      out->push_back('{');
      bool first = true;
      for (const auto& kv : node) {
        if (!first) out->push_back(',');
        first = false;
        AppendJsonString(out, kv.first.Scalar());
        out->push_back(':');
        AppendYamlAsJson(kv.second, out);
      }
      out->push_back('}');
      return;
    }
    case YAML::NodeType::Sequence: {
      out->push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendYamlAsJson(node[i], out);
      }
      out->push_back(']');
      return;
    }
    case YAML::NodeType::Scalar: {
      const std::string& v = node.Scalar();
      double number = 0;
      const bool plain = node.Tag() == "?";
      if (plain && (v == "true" || v == "false" || v == "null" ||
                    absl::SimpleAtod(v, &number))) {
        out->append(v);
      } else {
        AppendJsonString(out, v);
      }
      return;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out->append("null");
      return;
  }
}

// The change's kind as its field is spelled in the file.
const char* ChangeName(const v1::GroupChange& c) {
  switch (c.change_case()) {
    case v1::GroupChange::kCreateGroup:
      return "create_group";
    case v1::GroupChange::kUpdateGroup:
      return "update_group";
    case v1::GroupChange::kDeleteGroup:
      return "delete_group";
    case v1::GroupChange::kAddBackends:
      return "add_backends";
    case v1::GroupChange::kRemoveBackends:
      return "remove_backends";
    case v1::GroupChange::kDrainBackends:
      return "drain_backends";
    case v1::GroupChange::CHANGE_NOT_SET:
      break;
  }
  return "(no change)";
}

}  // namespace

int Ctl::ApplyChanges(const Args& a) {
  if (Missing(a, 1, "changes file (or - for standard input)")) {
    return kUsageError;
  }
  const std::string& path = a[0];
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return UsageFail(absl::StrCat(path, ": cannot open file"));
    text << in.rdbuf();
  }
  const std::string name = path == "-" ? "<stdin>" : path;
  absl::StatusOr<YAML::Node> root = yaml::LoadYaml(text.str(), name);
  if (!root.ok()) return UsageFail(root.status().message());
  std::string json;
  AppendYamlAsJson(*root, &json);
  v1::ApplyGroupChangesRequest all;
  if (auto s = google::protobuf::util::JsonStringToMessage(json, &all);
      !s.ok()) {
    return UsageFail(absl::StrCat(
        name, ": not an ApplyGroupChangesRequest ({changes: [...]}): ",
        s.message().as_string()));
  }
  if (all.changes().empty()) {
    return UsageFail(absl::StrCat(name, ": no changes"));
  }
  // More than one call's worth goes in calls of kMaxChanges, in order.
  constexpr int kMaxChanges = 1000;
  v1::ApplyGroupChangesResponse results;
  for (int start = 0; start < all.changes_size(); start += kMaxChanges) {
    v1::ApplyGroupChangesRequest req;
    for (int i = start; i < std::min(all.changes_size(), start + kMaxChanges);
         ++i) {
      *req.add_changes() = all.changes(i);
    }
    v1::ApplyGroupChangesResponse out;
    auto ctx = Context();
    grpc::Status s = admin_->ApplyGroupChanges(ctx.get(), req, &out);
    if (!s.ok()) {
      if (start > 0) {
        Say(absl::StrCat("asidectl: ", command_, ": changes 0..", start - 1,
                         " were sent and answered before this call failed"));
      }
      return Fail(s);
    }
    results.mutable_results()->MergeFrom(out.results());
  }
  int failed = 0;
  for (const v1::GroupChangeResult& r : results.results()) {
    failed += r.code() != 0 ? 1 : 0;
  }
  if (json_) {
    std::cout << ToJson(results) << "\n";
  } else {
    for (int i = 0; i < results.results_size(); ++i) {
      const v1::GroupChangeResult& r = results.results(i);
      std::cout << i << " " << ChangeName(all.changes(i)) << " " << r.group()
                << ": ";
      if (r.code() == 0) {
        std::cout << "ok (generation " << r.generation() << ")\n";
      } else {
        std::cout << absl::StatusCodeToString(
                         static_cast<absl::StatusCode>(r.code()))
                  << ": " << r.message() << "\n";
      }
    }
    std::cout << "applied " << results.results_size() - failed << " of "
              << results.results_size() << " changes\n";
  }
  return failed == 0 ? 0 : 1;
}

int Ctl::CreateGroup(const Args& a) {
  if (Missing(a, 1, "group name or file")) return kUsageError;
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

int Ctl::CreateOne(const v1::Group& group) {
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
              << out.generation() << ", " << out.state_size() << " backends)\n";
  }
  return 0;
}

// The group file in the config file's shorthand (YAML or JSON) or in
// protobuf JSON, through the converter the server's config loader uses.
absl::StatusOr<std::vector<v1::Group>> Ctl::LoadGroups(
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

int Ctl::DeleteGroup(const Args& a) {
  if (Missing(a, 1, "group name")) return kUsageError;
  v1::DeleteGroupRequest req;
  req.set_name(a[0]);
  v1::DeleteGroupResponse out;
  auto ctx = Context();
  grpc::Status s = admin_->DeleteGroup(ctx.get(), req, &out);
  if (!s.ok()) return Fail(s);
  if (json_) {
    std::cout << ToJson(out) << "\n";
  } else {
    std::cout << "deleted group " << a[0] << " (generation " << out.generation()
              << ")\n";
  }
  return 0;
}

int Ctl::AddBackends(const Args& a) {
  if (Missing(a, 2, "group name and backend address")) return kUsageError;
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

int Ctl::RemoveBackends(const Args& a) {
  if (Missing(a, 2, "group name and backend address")) return kUsageError;
  v1::RemoveBackendsRequest req;
  req.set_group(a[0]);
  for (size_t i = 1; i < a.size(); ++i) req.add_addresses(a[i]);
  v1::Group out;
  auto ctx = Context();
  return Changed(admin_->RemoveBackends(ctx.get(), req, &out), out,
                 absl::StrCat("removed ", a.size() - 1, " backend(s)"));
}

namespace {

// --self: this host's addresses, --self-ip (else $POD_IP) with each port.
absl::StatusOr<std::vector<std::string>> SelfAddresses() {
  const std::vector<std::string> ports = absl::GetFlag(FLAGS_self);
  std::string ip = absl::GetFlag(FLAGS_self_ip);
  if (ip.empty()) {
    const char* env = std::getenv("POD_IP");
    ip = env != nullptr ? env : "";
  }
  if (ip.empty()) {
    return Usage(
        "--self: this host's IP is unknown (set --self-ip or $POD_IP, e.g. "
        "from the pod's status.podIP)");
  }
  const bool v6 = ip.find(':') != std::string::npos;
  std::vector<std::string> addresses;
  for (const std::string& port : ports) {
    const std::string text =
        absl::StrCat(v6 ? "[" : "", ip, v6 ? "]:" : ":", port);
    absl::StatusOr<Address> address = ParseAddress(text);
    if (!address.ok()) {
      return Usage(absl::StrCat("--self ", port, " --self-ip ", ip, ": ",
                                address.status().message()));
    }
    if (!address->is_ip()) {
      return Usage(absl::StrCat("--self-ip ", ip, ": not an IP address"));
    }
    addresses.push_back(address->ToString());
  }
  return addresses;
}

}  // namespace

int Ctl::Drain(const Args& a, bool drained) {
  std::vector<std::string> addresses;
  if (!absl::GetFlag(FLAGS_self).empty()) {
    if (Missing(a, 1, "group name")) return kUsageError;
    if (a.size() > 1) {
      return UsageFail("give either --self PORT or ADDR..., not both");
    }
    absl::StatusOr<std::vector<std::string>> own = SelfAddresses();
    if (!own.ok()) return UsageFail(own.status().message());
    addresses = *std::move(own);
  } else {
    if (Missing(a, 2, "group name and backend address")) return kUsageError;
    addresses.assign(a.begin() + 1, a.end());
  }
  if (absl::GetFlag(FLAGS_wait) && !drained) {
    return UsageFail("--wait: only drain waits");
  }
  v1::DrainBackendsRequest req;
  req.set_group(a[0]);
  req.set_drained(drained);
  for (const std::string& address : addresses) req.add_addresses(address);
  v1::Group out;
  auto ctx = Context();
  if (absl::GetFlag(FLAGS_wait)) {
    const int code =
        Changed(admin_->DrainBackends(ctx.get(), req, &out), out,
                absl::StrCat("drained ", addresses.size(), " backend(s) ",
                             absl::StrJoin(addresses, " ")));
    return code != 0 ? code : WaitDrained(a[0], addresses);
  }
  return Changed(
      admin_->DrainBackends(ctx.get(), req, &out), out,
      absl::StrCat(drained ? "drained " : "undrained ", addresses.size(),
                   " backend(s)",
                   absl::GetFlag(FLAGS_self).empty()
                       ? ""
                       : absl::StrCat(" ", absl::StrJoin(addresses, " "))));
}

namespace {

// One WaitDrained call waits this long at most, so that progress shows.
constexpr absl::Duration kWaitRound = absl::Seconds(2);

std::string PendingByEdge(const v1::WaitDrainedResponse& r) {
  std::map<std::string, int> by_edge;
  for (const v1::PendingSubscriber& p : r.pending()) ++by_edge[p.edge()];
  std::vector<std::string> parts;
  for (const auto& [edge, n] : by_edge) {
    parts.push_back(absl::StrCat(edge, " ", n));
  }
  return parts.empty() ? ""
                       : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

int Ctl::WaitDrained(const std::string& group,
                     const std::vector<std::string>& addresses) {
  // --timeout bounds the whole wait here; without it, 30 s.
  const absl::Duration bound =
      absl::GetFlag(FLAGS_timeout).value_or(absl::Seconds(30));
  const absl::Time deadline = absl::Now() + bound;
  v1::WaitDrainedResponse out;
  while (true) {
    const absl::Duration round =
        std::clamp(deadline - absl::Now(), absl::Milliseconds(1), kWaitRound);
    v1::WaitDrainedRequest req;
    req.set_group(group);
    for (const std::string& address : addresses) req.add_addresses(address);
    req.mutable_timeout()->set_seconds(absl::ToInt64Seconds(round));
    req.mutable_timeout()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(round) % 1'000'000'000));
    auto ctx = Context(/*deadline=*/false);
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + round + timeout_));
    out.Clear();
    grpc::Status s = admin_->WaitDrained(ctx.get(), req, &out);
    if (!s.ok()) return Fail(s);
    if (out.drained()) break;
    if (absl::Now() >= deadline) {
      if (json_) {
        std::cout << ToJson(out) << "\n";
      }
      std::cout << std::flush;
      Say(absl::StrCat(
          "asidectl: drain: not drained after ", absl::FormatDuration(bound),
          ": ", out.pending_size(), " client(s) have not confirmed generation ",
          out.generation(), PendingByEdge(out), ", ", out.in_flight_size(),
          " reporter(s) with calls in flight"));
      for (const v1::PendingSubscriber& p : out.pending()) {
        Say(absl::StrCat("  ", p.edge(), " ",
                         p.subscriber().empty() ? "-" : p.subscriber(), " ",
                         p.peer(), " confirmed ", p.confirmed_generation()));
      }
      for (const v1::InFlightCalls& c : out.in_flight()) {
        Say(absl::StrCat("  in flight: ", c.reporter(), " -> ", c.address(),
                         ": ", c.in_flight()));
      }
      return 1;
    }
    if (!json_) {
      std::cout << "waiting: " << out.pending_size()
                << " client(s) have not confirmed generation "
                << out.generation() << PendingByEdge(out) << ", "
                << out.in_flight_size() << " reporter(s) with calls in flight"
                << std::endl;
    }
  }
  if (json_) {
    std::cout << ToJson(out) << "\n";
  } else {
    std::cout << "drained: every client of group " << group
              << " confirmed generation " << out.generation() << "\n";
  }
  return 0;
}

int Ctl::Changed(const grpc::Status& s, const v1::Group& out,
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

absl::StatusOr<v1::Backend> Ctl::ParseBackend(const std::string& spec) {
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

}  // namespace aside::asidectl
