// scale_bench: the bytes a Watch subscriber that lags k generations behind
// is sent (one combined delta, server/groups/table_encoding.h), against the
// one-step delta a current subscriber gets for the newest change, the k
// one-step deltas it got for all of them, and the full table.
//
// Two shapes of change, each one backend per generation:
//   - one backend changed again and again (a backend draining, a weight
//     being tuned): the combined delta carries it once;
//   - a different backend each time (a rolling deploy): the combined delta
//     carries all k, as the k one-step deltas together do.
// Past kDeltaBases the subscriber gets the full table.
// Sizes are exact (no timing): one run is the figure.
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/scale/scale_common.h"
#include "lib/table.h"
#include "server/groups/group_table_builder.h"
#include "server/groups/table_encoding.h"

namespace aside::server::scale {

namespace {

// Tables t[0..kDeltaBases + 1] of one group of `n` backends (lags up to
// one past the bases kept); generation i
// changes the weight of backend `which(i)`.
std::vector<std::shared_ptr<const Table>> Tables(
    size_t n, const std::function<size_t(size_t)>& which) {
  std::vector<Backend> backends = MakeBackends(n);
  const GroupSpec spec = MakeSpec("lag", 0);
  const std::vector<MemberStatus> statuses(n);
  auto key = std::make_shared<const std::string>(32, 'k');
  std::vector<std::shared_ptr<const Table>> tables;
  for (size_t i = 0; i <= kDeltaBases + 1; ++i) {
    if (i > 0) {
      backends[which(i) % n].weight = static_cast<uint32_t>(2 + i);
    }
    TableSpec ts = BuildTableSpec(spec, backends, statuses, key, 0);
    ts.generation = i + 1;
    tables.push_back(*Table::Create(
        std::move(ts), tables.empty() ? nullptr : tables.back().get(),
        nullptr));
  }
  return tables;
}

}  // namespace

void LaggingSubscriber(const std::vector<size_t>& sizes) {
  std::printf(
      "\n### A lagging Watch subscriber: bytes of its update\n\n"
      "| backends | change | lag k | update sent | one-step delta | "
      "sent / one-step | k one-step deltas | sent / their sum | "
      "full table |\n|---|---|---|---|---|---|---|---|---|\n");
  for (size_t n : sizes) {
    for (const bool rolling : {false, true}) {
      const auto tables = Tables(n, [&](size_t i) {
        return rolling ? i * 7 + 1
                       : n / 2;  // distinct backends for i <= 9 at 10+
      });
      // Every generation's encoding, each with the group's recent tables
      // as bases, as Group::Encoded makes it.
      std::vector<std::shared_ptr<const EncodedUpdate>> encoded(tables.size());
      for (size_t i = 1; i < tables.size(); ++i) {
        std::vector<std::shared_ptr<const Table>> bases(
            tables.begin() + static_cast<std::ptrdiff_t>(
                                 i > kDeltaBases ? i - kDeltaBases : 0),
            tables.begin() + static_cast<std::ptrdiff_t>(i));
        encoded[i] =
            EncodeUpdate(tables[i - 1].get(), tables[i], "server", bases);
      }
      const EncodedUpdate& newest = *encoded.back();
      const size_t last = tables.size() - 1;
      for (size_t k = 1; k <= kDeltaBases + 1; ++k) {
        size_t combined = 0;
        const grpc::ByteBuffer* d =
            newest.DeltaFrom(tables[last - k]->generation(), &combined);
        size_t steps = 0;
        for (size_t i = last - k + 1; i <= last; ++i) {
          steps += encoded[i]->delta_bytes;
        }
        // What is sent: the combined delta, or the full table when there
        // is none.
        const size_t sent = d == nullptr ? newest.full_bytes() : combined;
        std::printf(
            "| %zu | %s | %zu | %s%zu B | %zu B | %.2f× | %zu B | %.2f× | "
            "%zu B |\n",
            n, rolling ? "a different backend each time" : "the same backend",
            k, d == nullptr ? "full table, " : "", sent, newest.delta_bytes,
            static_cast<double>(sent) / newest.delta_bytes, steps,
            static_cast<double>(sent) / static_cast<double>(steps),
            newest.full_bytes());
      }
    }
  }
  std::fflush(stdout);
}

}  // namespace aside::server::scale
