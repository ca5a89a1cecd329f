// scale_bench: one large group (build, full encode, delta, stub apply).
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

void LargeGroup(size_t n, int reps, double min_seconds) {
  const std::vector<Backend> backends = MakeBackends(n);
  GroupSpec spec = MakeSpec("big", 0);
  const std::vector<MemberStatus> statuses(n);
  auto key = std::make_shared<const std::string>(32, 'k');
  auto build = [&](const std::vector<Backend>& bs, const Table* previous) {
    TableSpec ts = BuildTableSpec(spec, bs, statuses, key, 0);
    ts.generation = previous == nullptr ? 1 : previous->generation() + 1;
    return *Table::Create(std::move(ts), previous, nullptr);
  };
  TableConstPtr table = build(backends, nullptr);
  std::vector<Backend> changed = backends;
  changed[n / 2].weight = 7;
  TableConstPtr next = build(changed, table.get());

  v1::GroupUpdate full_pb;
  full_pb.set_group("big");
  full_pb.set_generation(table->generation());
  full_pb.set_server_id("server");
  ToProto(*table, full_pb.mutable_full());
  std::shared_ptr<const EncodedUpdate> encoded =
      EncodeUpdate(table.get(), next, "server");
  v1::GroupUpdate delta_pb;
  delta_pb.set_group("big");
  delta_pb.set_generation(next->generation());
  delta_pb.set_server_id("server");
  MakeDelta(*table, *next, delta_pb.mutable_delta());
  const std::string full_bytes = full_pb.SerializeAsString();

  Row copy{"bare vector<Backend> copy", {}, "ms", 1e3, "", {}, {}};
  Row b{absl::StrCat("table build (BuildTableSpec + Table::Create), ", n),
        {},
        "ms",
        1e3,
        "vector copy",
        {},
        {}};
  Row e{absl::StrCat("full-table encode (EncodedUpdate::full), ", n),
        {},
        "ms",
        1e3,
        "bare SerializeAsString of the same GroupUpdate",
        {},
        {}};
  Row d{absl::StrCat("one-backend change: MakeDelta alone, ", n),
        {},
        "µs",
        1e6,
        "vector copy",
        {},
        {}};
  Row ed{absl::StrCat(
             "one-backend change: EncodeUpdate (the delta; the full table "
             "only when asked for), ",
             n),
         {},
         "ms",
         1e3,
         "bare SerializeAsString of the full GroupUpdate",
         {},
         {}};
  Row a{absl::StrCat("stub applies the delta (WatchedTable::Apply), ", n),
        {},
        "ms",
        1e3,
        "vector copy",
        {},
        {}};
  for (int r = 0; r < reps; ++r) {
    const double t_copy = TimePerCall(
        [&] {
          std::vector<Backend> c = backends;
          asm volatile("" : : "r"(c.data()) : "memory");
        },
        min_seconds);
    const double t_ser = TimePerCall(
        [&] {
          std::string s = full_pb.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
        },
        min_seconds);
    const double t_build =
        TimePerCall([&] { (void)build(backends, nullptr); }, min_seconds);
    const double t_encode = TimePerCall(
        [&] {
          std::shared_ptr<const EncodedUpdate> u =
              EncodeUpdate(nullptr, table, "server");
          (void)u->full();
        },
        min_seconds);
    const double t_delta = TimePerCall(
        [&] {
          v1::TableDelta delta;
          MakeDelta(*table, *next, &delta);
        },
        min_seconds);
    const double t_encode_delta = TimePerCall(
        [&] { (void)EncodeUpdate(table.get(), next, "server"); }, min_seconds);
    // The stub: a full table, then the delta, each Apply timed on its own.
    double apply_total = 0;
    int applies = 0;
    const auto apply_start = Clock::now();
    do {
      // As a stub holds it: with the group's load tracker.
      LoadTracker loads;
      WatchedTable held("big", &loads);
      v1::GroupUpdate full;
      full.ParseFromString(full_bytes);
      if (held.Apply(full).outcome != WatchedTable::Outcome::kApplied) {
        std::fprintf(stderr, "full table not applied\n");
        std::exit(1);
      }
      const auto t0 = Clock::now();
      const WatchedTable::Result res = held.Apply(delta_pb);
      apply_total += Seconds(t0, Clock::now());
      ++applies;
      if (res.outcome != WatchedTable::Outcome::kApplied) {
        std::fprintf(stderr, "delta not applied: %s\n",
                     res.error.ToString().c_str());
        std::exit(1);
      }
    } while (Seconds(apply_start, Clock::now()) < min_seconds);
    const double t_apply = apply_total / applies;

    copy.value.Add(t_copy);
    copy.floor.Add(t_copy);
    copy.ratio.Add(1);
    b.value.Add(t_build);
    b.floor.Add(t_copy);
    b.ratio.Add(t_build / t_copy);
    e.value.Add(t_encode);
    e.floor.Add(t_ser);
    e.ratio.Add(t_encode / t_ser);
    d.value.Add(t_delta);
    d.floor.Add(t_copy);
    d.ratio.Add(t_delta / t_copy);
    ed.value.Add(t_encode_delta);
    ed.floor.Add(t_ser);
    ed.ratio.Add(t_encode_delta / t_ser);
    a.value.Add(t_apply);
    a.floor.Add(t_copy);
    a.ratio.Add(t_apply / t_copy);
  }
  Print(b);
  Print(e);
  Print(d);
  Print(ed);
  Print(a);
  std::printf(
      "| sizes, %zu backends | full %zu B (%.1f B/backend), delta %zu B | "
      "bare full GroupUpdate %zu B | delta/full %.2g |\n",
      n, encoded->full_bytes(),
      static_cast<double>(encoded->full_bytes()) / static_cast<double>(n),
      encoded->delta_bytes, full_bytes.size(),
      static_cast<double>(encoded->delta_bytes) /
          static_cast<double>(encoded->full_bytes()));
}

}  // namespace aside::server::scale
