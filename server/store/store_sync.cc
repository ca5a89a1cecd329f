#include "server/store/store_sync.h"

#include <cstdlib>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "server/base/log.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {

StoreSync::StoreSync(Store* store, GroupRegistry* groups, Metrics* metrics)
    : store_(store),
      committer_(store,
                 metrics != nullptr ? &metrics->store_commit_writes : nullptr),
      groups_(groups),
      metrics_(metrics) {}

uint64_t StoreSync::GenerationFor(int64_t revision) const {
  return store_->revision_generations() && revision > 0
             ? GenerationForRevision(revision)
             : 0;
}

int64_t StoreSync::revision(const std::string& name) const {
  aside::MutexLock lock(&mu_);
  auto it = applied_.find(name);
  return it == applied_.end() || !it->second.present ? 0 : it->second.revision;
}

void StoreSync::BadValue(const std::string& name, int64_t revision,
                         absl::string_view error) {
  Log(LogLevel::kError, "store.bad_value",
      {{"store", store_->location()},
       {"group", name},
       {"revision", absl::StrCat(revision)},
       {"error", std::string(error)},
       {"action", "keeping the last good definition"}});
  if (metrics_ != nullptr) {
    metrics_->store_errors.Add({{"kind", "bad_value"}}).Increment();
  }
}

absl::Status StoreSync::ApplyInitial(const StoreSnapshot& snapshot,
                                     bool strict) {
  aside::MutexLock lock(&mu_);
  for (const StoredGroup& stored : snapshot.groups) {
    const std::string& name = stored.definition.name();
    applied_[name] = {stored.revision, true, nullptr};
    if (GroupPtr existing = groups_->Find(name); existing != nullptr) {
      Log(LogLevel::kWarn, "state.group_shadowed",
          {{"group", name},
           {"reason", "the config file declares a group of the same name"}});
      continue;
    }
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto(
        absl::StrCat("stored group '", name, "'"), stored.definition);
    absl::Status s = spec.status();
    if (spec.ok()) {
      applied_[name].spec = std::make_shared<const GroupSpec>(*spec);
      s = groups_->Add(*std::move(spec), nullptr,
                       GenerationFor(stored.revision));
      if (absl::IsAlreadyExists(s)) {
        // An alias the config file (or an earlier stored group) now owns:
        // the file wins, as for names; the stored group stays stored.
        Log(LogLevel::kWarn, "state.group_shadowed",
            {{"group", name}, {"reason", std::string(s.message())}});
        continue;
      }
      if (!s.ok()) {
        s = absl::Status(s.code(),
                         absl::StrCat("group '", name, "': ", s.message()));
      }
    }
    if (!s.ok()) {
      if (strict) {
        return absl::FailedPreconditionError(absl::StrCat(
            "state database ", store_->location(), ": ", s.message()));
      }
      BadValue(name, stored.revision, s.message());
    }
  }
  for (const StoredGroup& bad : snapshot.bad) {
    applied_[bad.definition.name()] = {bad.revision, true, nullptr};
  }
  Log(LogLevel::kInfo, "state.loaded",
      {{"path", store_->location()},
       {"stored_groups", absl::StrCat(snapshot.groups.size())},
       {"revision", absl::StrCat(snapshot.revision)}});
  return absl::OkStatus();
}

void StoreSync::Follow(std::optional<int64_t> revision) {
  store_->Follow(
      revision,
      {.on_snapshot = [this](const StoreSnapshot& s) { ApplySnapshot(s); },
       .on_changes = [this](const std::vector<StoreChange>& c,
                            int64_t) { ApplyChanges(c); }});
}

void StoreSync::StopFollowing() { store_->StopFollowing(); }

void StoreSync::ApplySnapshot(const StoreSnapshot& snapshot) {
  aside::MutexLock lock(&mu_);
  absl::flat_hash_set<std::string> present;
  for (const StoredGroup& stored : snapshot.groups) {
    present.insert(stored.definition.name());
    (void)ApplyLocked({.name = stored.definition.name(),
                       .definition = stored.definition,
                       .revision = stored.revision});
  }
  for (const StoredGroup& bad : snapshot.bad) {
    present.insert(bad.definition.name());
    (void)ApplyLocked({.name = bad.definition.name(),
                       .revision = bad.revision,
                       .bad_value = true});
  }
  // Whatever is gone was deleted at some revision up to the snapshot's.
  std::vector<std::string> gone;
  for (const auto& [name, applied] : applied_) {
    if (applied.present && !present.contains(name)) {
      gone.push_back(name);
    }
  }
  for (const std::string& name : gone) {
    (void)ApplyLocked({.name = name, .revision = snapshot.revision});
  }
}

void StoreSync::ApplyChanges(const std::vector<StoreChange>& changes) {
  // A definition that a later one of the same batch replaces is never
  // published: a replica catching up on a burst of writes to one group
  // builds and sends its last table only. (Deletions still apply, and so
  // does every definition when the last one does not convert: a bad value
  // keeps the last good one.)
  auto is_put = [](const StoreChange& c) {
    return c.definition.has_value() && !c.bad_value && c.revision != 0;
  };
  absl::flat_hash_map<absl::string_view, size_t> last_put;
  for (size_t i = 0; i < changes.size(); ++i) {
    if (is_put(changes[i])) {
      last_put[changes[i].name] = i;
    }
  }
  std::vector<bool> skip(changes.size(), false);
  absl::flat_hash_map<size_t, bool> converts;  // by the superseding index
  for (size_t i = 0; i < changes.size(); ++i) {
    const StoreChange& c = changes[i];
    if (!is_put(c)) {
      continue;
    }
    const size_t last = last_put[c.name];
    if (last == i || changes[last].revision <= c.revision) {
      continue;
    }
    auto [it, added] = converts.try_emplace(last, false);
    if (added) {
      it->second = GroupSpecFromProto(c.name, *changes[last].definition).ok();
    }
    skip[i] = it->second;
  }
  aside::MutexLock lock(&mu_);
  for (size_t i = 0; i < changes.size(); ++i) {
    if (skip[i]) {
      if (metrics_ != nullptr) {
        metrics_->store_changes_superseded.Increment();
      }
      continue;
    }
    (void)ApplyLocked(changes[i]);
  }
}

absl::Status StoreSync::ApplyLocked(const StoreChange& change,
                                    const GroupSpec* validated) {
  Applied& applied = applied_[change.name];
  if (change.revision != 0 && change.revision <= applied.revision) {
    return absl::OkStatus();  // already applied (or a newer one)
  }
  applied.revision = change.revision;
  applied.present = change.definition.has_value() || change.bad_value;
  if (change.bad_value) {
    return absl::OkStatus();  // the store logged and counted it
  }
  if (!change.definition.has_value()) {
    applied.spec = nullptr;
  }
  GroupPtr existing = groups_->Find(change.name);
  if (existing != nullptr && existing->spec().source == GroupSource::kFile) {
    Log(LogLevel::kWarn, "state.group_shadowed",
        {{"group", change.name},
         {"revision", absl::StrCat(change.revision)},
         {"reason", "the config file declares a group of the same name"}});
    return absl::OkStatus();
  }
  const uint64_t generation = GenerationFor(change.revision);
  if (!change.definition.has_value()) {
    if (existing == nullptr) {
      return absl::OkStatus();
    }
    return groups_->Remove(change.name, nullptr, generation);
  }
  absl::StatusOr<GroupSpec> spec =
      validated != nullptr
          ? absl::StatusOr<GroupSpec>(*validated)
          : GroupSpecFromProto(absl::StrCat("stored group '", change.name, "'"),
                               *change.definition);
#ifndef NDEBUG
  // Other replicas convert the stored definition: the writer's validated
  // spec must be exactly what they get, or replicas would serve different
  // tables. (Debug builds, and so the sanitizer runs of the tests, check.)
  if (validated != nullptr) {
    absl::StatusOr<GroupSpec> stored =
        GroupSpecFromProto(change.name, *change.definition);
    if (!stored.ok() || !(*stored == *validated)) {
      Log(LogLevel::kError, "store.spec_mismatch", {{"group", change.name}});
      std::abort();
    }
  }
#endif
  absl::Status s = spec.status();
  if (spec.ok()) {
    applied.spec = std::make_shared<const GroupSpec>(*spec);
    s = existing != nullptr
            ? groups_->Update(existing, *std::move(spec), nullptr, generation)
            : groups_->Add(*std::move(spec), nullptr, generation);
  }
  if (!s.ok()) {
    BadValue(change.name, change.revision, s.message());
  }
  return s;
}

StoreSync::Read StoreSync::ReadLocal(const std::string& name) const {
  aside::MutexLock lock(&mu_);
  auto it = applied_.find(name);
  if (it == applied_.end() || !it->second.present) {
    return {};
  }
  return {it->second.spec, it->second.revision};
}

absl::StatusOr<StoreSync::Read> StoreSync::ReadFromStore(
    const std::string& name) const {
  ASIDE_ASSIGN_OR_RETURN(const StoreChange stored, store_->ReadGroup(name));
  Read out{.revision = stored.revision};
  if (stored.definition.has_value()) {
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto(
        absl::StrCat("stored group '", name, "'"), *stored.definition);
    if (spec.ok()) {
      out.spec = std::make_shared<const GroupSpec>(*std::move(spec));
      return out;
    }
  } else if (!stored.bad_value) {
    return out;  // absent
  }
  // A stored value this server cannot serve: the change is made to the
  // last good definition, replacing the bad one (as the feed keeps serving
  // that definition).
  out.spec = ReadLocal(name).spec;
  return out;
}

absl::StatusOr<StoreSync::Written> StoreSync::Mutate(const std::string& name,
                                                     int64_t expected_revision,
                                                     OnConflict on_conflict,
                                                     const Edit& edit) {
  // A store without revisions has this process as its only writer (and
  // Admin serialises its mutations): its view is the store.
  const bool shared = store_->revision_generations();
  if (!shared && expected_revision != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_revision: the ", store_->type(), " store ",
                     store_->location(), " has no revisions (leave it 0)"));
  }
  Read current = ReadLocal(name);
  bool fresh = false;
  auto refresh = [&]() -> absl::Status {
    ASIDE_ASSIGN_OR_RETURN(current, ReadFromStore(name));
    fresh = true;
    return absl::OkStatus();
  };
  if (shared && expected_revision != 0 &&
      current.revision != expected_revision) {
    ASIDE_RETURN_IF_ERROR(refresh());
  }
  for (int attempt = 1;; ++attempt) {
    if (expected_revision != 0 && current.revision != expected_revision) {
      return absl::AbortedError(
          absl::StrCat("group '", name, "' is at store revision ",
                       current.revision, ", not the expected ",
                       expected_revision, "; read it again and retry"));
    }
    absl::StatusOr<std::optional<GroupSpec>> next = edit(current.spec.get());
    if (!next.ok()) {
      if (shared && !fresh &&
          (absl::IsNotFound(next.status()) ||
           absl::IsAlreadyExists(next.status()))) {
        // This replica may not have seen a write made through another
        // one yet: decide on the store's own value.
        ASIDE_RETURN_IF_ERROR(refresh());
        continue;
      }
      return next.status();
    }
    absl::StatusOr<Written> written =
        Write(name, *std::move(next), current.revision);
    if (!absl::IsAborted(written.status()) || !shared ||
        on_conflict == OnConflict::kAbortOnConflict || expected_revision != 0 ||
        attempt >= kMaxWriteAttempts) {
      return written;
    }
    ASIDE_RETURN_IF_ERROR(refresh());
  }
}

absl::StatusOr<StoreSync::Written> StoreSync::Write(
    const std::string& name, std::optional<GroupSpec> next, int64_t expected) {
  if (!next.has_value()) {
    ASIDE_ASSIGN_OR_RETURN(
        const int64_t written,
        committer_.Commit({.name = name, .expected_revision = expected}));
    aside::MutexLock lock(&mu_);
    if (written == 0) {
      applied_.erase(name);
      uint64_t generation = 0;
      ASIDE_RETURN_IF_ERROR(groups_->Remove(name, [&](uint64_t g) {
        generation = g;
        return absl::OkStatus();
      }));
      return Written{.generation = generation};
    }
    ASIDE_RETURN_IF_ERROR(ApplyLocked({.name = name, .revision = written}));
    return Written{.generation = GenerationFor(written), .revision = written};
  }
  GroupSpec spec = *std::move(next);
  v1::Group definition;
  GroupSpecToProto(spec, &definition);
  // A name or alias another group holds is refused before the store sees
  // it: every replica would refuse to serve the write.
  ASIDE_RETURN_IF_ERROR(groups_->CheckNamespace(spec));
  ASIDE_ASSIGN_OR_RETURN(const int64_t written,
                         committer_.Commit({.name = name,
                                            .definition = definition,
                                            .expected_revision = expected}));
  aside::MutexLock lock(&mu_);
  const GroupPtr before = groups_->Find(name);
  absl::Status s;
  if (written == 0) {
    // A store without revisions: this process is its only writer.
    applied_[name] = {0, true, std::make_shared<const GroupSpec>(spec)};
    s = before != nullptr ? groups_->Update(before, std::move(spec))
                          : groups_->Add(std::move(spec));
  } else {
    s = ApplyLocked(
        {.name = name, .definition = definition, .revision = written}, &spec);
  }
  if (!s.ok()) {
    if (before == nullptr) {
      // The store took a group this replica cannot serve (the group limit):
      // take it back rather than leave the fleet with a group no one serves.
      (void)store_->DeleteGroup(name, written);
      applied_[name] = {written, false, nullptr};
    }
    return s;
  }
  GroupPtr group = groups_->Find(name);
  if (group == nullptr) {
    return absl::AbortedError(absl::StrCat(
        "group '", name, "' was deleted through another replica meanwhile"));
  }
  return Written{.group = std::move(group), .revision = written};
}

}  // namespace aside::server
