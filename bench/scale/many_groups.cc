// scale_bench: many groups (start, ListGroups, memory, removal).
#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/scale/scale_common.h"
#include "client/watched_table.h"
#include "lib/table.h"
#include "proto/convert.h"
#include "server/api/admin_service.h"
#include "server/auth/admin_auth.h"
#include "server/base/log.h"
#include "server/config/config.h"
#include "server/groups/group_registry.h"
#include "server/groups/group_table_builder.h"
#include "server/groups/table_encoding.h"
#include "server/schema/group_spec_proto.h"
#include "server/server.h"
#include "server/store/sqlite_store.h"
#include "server/store/store_sync.h"

namespace aside::server::scale {

std::string WriteConfig(const std::string& dir, size_t groups,
                        size_t backends) {
  const std::string path = dir + "/scale.yaml";
  std::ofstream out(path);
  out << "listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\nstate_dir: " << dir
      << "/state\nlimits: {max_groups: " << groups << "}\ngroups:\n";
  for (size_t g = 0; g < groups; ++g) {
    out << "  - name: g" << g
        << "\n    policy: round_robin\n    health_check: {kind: none}\n"
           "    backends: [";
    for (size_t i = 0; i < backends; ++i) {
      out << (i ? ", " : "") << Address(g * backends + i);
    }
    out << "]\n";
  }
  return path;
}

void ManyGroups(size_t groups, size_t backends, int reps) {
  char tmpl[] = "/tmp/aside-scale-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = WriteConfig(dir, groups, backends);
  Row start{absl::StrCat("server start (LoadConfigFile + AsideServer::Create "
                         "+ Start), ",
                         groups, " groups × ", backends),
            {},
            "s",
            1,
            "bare YAML::LoadFile",
            {},
            {}};
  Row list{absl::StrCat("ListGroups (DoListGroups + serialize), ", groups,
                        " groups"),
           {},
           "ms",
           1e3,
           "bare SerializeAsString of the same response",
           {},
           {}};
  Row rss{absl::StrCat("heap in use per group (mallinfo2; registry with "
                       "metrics), ",
                       groups, " groups × ", backends),
          {},
          "KiB",
          1.0 / 1024,
          "its definition's protobuf bytes",
          {},
          {}};
  Row remove{absl::StrCat("GroupRegistry::Remove of one group among ", groups,
                          " (its metrics included)"),
             {},
             "ms",
             1e3,
             "the same Remove on a registry without metrics",
             {},
             {}};
  Range heap_table;
  Range parse, create, serve, add_per_group, heap_plain;
  // Removing a group (and its metrics) from G, then adding it back.
  const size_t churn = std::min<size_t>(groups, 20);
  for (int r = 0; r < reps; ++r) {
    const auto y0 = Clock::now();
    YAML::Node node = YAML::LoadFile(path);
    const double t_yaml = Seconds(y0, Clock::now());
    (void)node;
    {
      const auto s0 = Clock::now();
      absl::StatusOr<ServerConfig> config = LoadConfigFile(path);
      if (!config.ok()) {
        std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
        std::exit(1);
      }
      const auto s1 = Clock::now();
      absl::StatusOr<std::unique_ptr<AsideServer>> server =
          AsideServer::Create(*std::move(config));
      const auto s2 = Clock::now();
      if (!server.ok() || !(*server)->Start().ok()) {
        std::fprintf(stderr, "server did not start: %s\n",
                     server.status().ToString().c_str());
        std::exit(1);
      }
      const double t_start = Seconds(s0, Clock::now());
      start.value.Add(t_start);
      start.floor.Add(t_yaml);
      start.ratio.Add(t_start / t_yaml);
      parse.Add(Seconds(s0, s1));
      create.Add(Seconds(s1, s2));
      serve.Add(Seconds(s2, Clock::now()));
      (*server)->Shutdown(absl::Seconds(1));
      (*server)->Wait();
      // Not destroyed: the process exits soon.
      (void)server->release();
    }
    // RSS and ListGroups on a registry of its own.
    Metrics metrics;
    const double heap0 = HeapBytes();
    auto registry = *GroupRegistry::Create(&metrics, 1, groups);
    size_t def_bytes = 0;
    double adding = 0;
    for (size_t g = 0; g < groups; ++g) {
      GroupSpec spec = MakeSpec(absl::StrCat("g", g), 0);
      spec.backends.resize(backends);
      for (size_t i = 0; i < backends; ++i) {
        spec.backends[i].address = Address(g * backends + i);
      }
      v1::Group def;
      GroupSpecToProto(spec, &def);
      def_bytes += def.ByteSizeLong();
      const auto a0 = Clock::now();
      if (absl::Status s = registry->Add(std::move(spec)); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        std::exit(1);
      }
      adding += Seconds(a0, Clock::now());
    }
    add_per_group.Add(adding / static_cast<double>(groups));
    const double per_group =
        (HeapBytes() - heap0) / static_cast<double>(groups);
    const double def_per_group =
        static_cast<double>(def_bytes) / static_cast<double>(groups);
    rss.value.Add(per_group);
    rss.floor.Add(def_per_group);
    rss.ratio.Add(per_group / def_per_group);
    // The same groups without Prometheus metrics.
    double remove_floor = 0;
    {
      const double bare0 = HeapBytes();
      auto plain = *GroupRegistry::Create(nullptr, 1, groups);
      for (size_t g = 0; g < groups; ++g) {
        GroupSpec spec = MakeSpec(absl::StrCat("g", g), 0);
        spec.backends.resize(backends);
        for (size_t i = 0; i < backends; ++i) {
          spec.backends[i].address = Address(g * backends + i);
        }
        if (!plain->Add(std::move(spec)).ok()) std::abort();
      }
      heap_plain.Add((HeapBytes() - bare0) / static_cast<double>(groups));
      // The floor of removing a group: the same registry work, no metrics.
      double removing = 0;
      for (size_t g = 0; g < churn; ++g) {
        const auto r0 = Clock::now();
        if (!plain->Remove(absl::StrCat("g", g)).ok()) std::abort();
        removing += Seconds(r0, Clock::now());
      }
      remove_floor = removing / static_cast<double>(churn);
      remove.floor.Add(remove_floor);
    }
    // Of which the published table alone (BuildTableSpec + Table::Create).
    {
      const double table0 = HeapBytes();
      std::vector<TableConstPtr> tables;
      const GroupSpec spec = MakeSpec("t", backends);
      const std::vector<MemberStatus> statuses(backends);
      auto key = std::make_shared<const std::string>(32, 'k');
      for (size_t g = 0; g < groups; ++g) {
        TableSpec ts = BuildTableSpec(spec, spec.backends, statuses, key, 0);
        ts.generation = 1;
        tables.push_back(*Table::Create(std::move(ts), nullptr, nullptr));
      }
      heap_table.Add((HeapBytes() - table0) / static_cast<double>(groups));
    }
    AdminService admin(registry.get(), nullptr, nullptr, &metrics);
    v1::ListGroupsResponse response;
    const double t_list = TimePerCall(
        [&] {
          v1::ListGroupsResponse resp;
          (void)admin.DoListGroups({}, &resp);
          std::string s = resp.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
          response = std::move(resp);
        },
        0.3);
    const double t_ser = TimePerCall(
        [&] {
          std::string s = response.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
        },
        0.3);
    list.value.Add(t_list);
    list.floor.Add(t_ser);
    list.ratio.Add(t_list / t_ser);
    double removing = 0;
    for (size_t g = 0; g < churn; ++g) {
      const auto r0 = Clock::now();
      if (!registry->Remove(absl::StrCat("g", g)).ok()) std::abort();
      removing += Seconds(r0, Clock::now());
    }
    remove.value.Add(removing / static_cast<double>(churn));
    remove.ratio.Add(removing / static_cast<double>(churn) / remove_floor);
    // Not destroyed, as above.
    (void)registry.release();
  }
  Print(start);
  std::printf(
      "| start's parts: LoadConfigFile / AsideServer::Create / Start "
      "| %s / %s / %s | | |\n",
      Fmt(parse, "s", 1).c_str(), Fmt(create, "s", 1).c_str(),
      Fmt(serve, "s", 1).c_str());
  std::printf(
      "| GroupRegistry::Add, mean per group over %zu groups | %s | | "
      "|\n",
      groups, Fmt(add_per_group, "µs", 1e6).c_str());
  Print(list);
  Print(rss);
  std::printf(
      "| heap in use per group without Prometheus metrics | %s | | "
      "|\n",
      Fmt(heap_plain, "KiB", 1.0 / 1024).c_str());
  std::printf(
      "| of which its table (Table::Create, round_robin) | %s | | "
      "|\n",
      Fmt(heap_table, "KiB", 1.0 / 1024).c_str());
  Print(remove);
  std::filesystem::remove_all(dir);
}

}  // namespace aside::server::scale
