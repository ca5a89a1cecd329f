#include "client/watched_table.h"

#include "absl/strings/str_cat.h"
#include "proto/convert.h"

namespace aside {

absl::string_view OutcomeName(WatchedTable::Outcome outcome) {
  switch (outcome) {
    case WatchedTable::Outcome::kApplied:
      return "applied";
    case WatchedTable::Outcome::kUnchanged:
      return "unchanged";
    case WatchedTable::Outcome::kStale:
      return "stale";
    case WatchedTable::Outcome::kRejected:
      return "rejected";
    case WatchedTable::Outcome::kNeedFull:
      return "need_full";
    case WatchedTable::Outcome::kRemoved:
      return "removed";
  }
  return "unknown";
}

TableSpec WatchedTable::HeldSpec() const {
  TableSpec spec;
  spec.group = table_->group();
  spec.generation = table_->generation();
  spec.policy = table_->policy();
  spec.panic_threshold = table_->panic_threshold();
  spec.session_key = table_->session_key();
  spec.zone_weights = table_->zone_weights();
  // Table::Create's `ready && !drained` gives the same result again, and
  // it sets `eligible` and `load` afresh.
  spec.members = table_->members();
  return spec;
}

WatchedTable::Result WatchedTable::Build(TableSpec spec,
                                         const std::string& server_id) {
  const uint64_t generation = spec.generation;
  absl::StatusOr<TableConstPtr> table =
      Table::Create(std::move(spec), table_.get(), loads_);
  if (!table.ok()) {
    ++rejected_;
    return {Outcome::kRejected,
            absl::InvalidArgumentError(
                absl::StrCat("group '", group_, "' generation ", generation,
                             ": table rejected: ", table.status().message()))};
  }
  table_ = *std::move(table);
  server_id_ = server_id;
  return {Outcome::kApplied, absl::OkStatus()};
}

WatchedTable::Result WatchedTable::Apply(const v1::GroupUpdate& update) {
  auto reject = [&](absl::string_view why) -> Result {
    ++rejected_;
    return {Outcome::kRejected,
            absl::InvalidArgumentError(
                absl::StrCat("group '", group_, "' generation ",
                             update.generation(), ": update rejected: ", why))};
  };
  if (update.group() != group_) {
    return reject(absl::StrCat("update is for group '", update.group(), "'"));
  }
  const bool same_server =
      table_ != nullptr && update.server_id() == server_id_;
  switch (update.update_case()) {
    case v1::GroupUpdate::kRemoved:
      return {Outcome::kRemoved, absl::OkStatus()};
    case v1::GroupUpdate::kFull: {
      if (same_server && update.generation() <= generation()) {
        return {update.generation() == generation() ? Outcome::kUnchanged
                                                    : Outcome::kStale,
                absl::OkStatus()};
      }
      absl::StatusOr<TableSpec> spec =
          FromProto(group_, update.generation(), update.full());
      if (!spec.ok()) {
        return reject(spec.status().message());
      }
      spec->group = group_;
      return Build(*std::move(spec), update.server_id());
    }
    case v1::GroupUpdate::kDelta: {
      const v1::TableDelta& delta = update.delta();
      if (!same_server) {
        return {
            Outcome::kNeedFull,
            absl::FailedPreconditionError(absl::StrCat(
                "group '", group_, "': delta from server '", update.server_id(),
                "' but the table held is from '", server_id_, "'"))};
      }
      if (update.generation() < generation()) {
        return {Outcome::kStale, absl::OkStatus()};
      }
      if (delta.base_generation() != generation()) {
        return {Outcome::kNeedFull,
                absl::FailedPreconditionError(
                    absl::StrCat("group '", group_, "': delta from generation ",
                                 delta.base_generation(), " but generation ",
                                 generation(), " is held"))};
      }
      if (update.generation() == generation()) {
        return {Outcome::kUnchanged, absl::OkStatus()};
      }
      TableSpec spec = HeldSpec();
      if (absl::Status s = ApplyDelta(delta, update.generation(), &spec);
          !s.ok()) {
        return reject(s.message());
      }
      return Build(std::move(spec), update.server_id());
    }
    case v1::GroupUpdate::UPDATE_NOT_SET:
      break;
  }
  return reject("no full table, delta or removal");
}

}  // namespace aside
