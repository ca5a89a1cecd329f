#include "server/store/store_sync.h"

#include <algorithm>
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
      s = groups_->Add(*std::move(spec), GenerationFor(stored.revision));
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

StoreSync::FoldStats StoreSync::fold_stats() const {
  aside::MutexLock lock(&fold_mu_);
  FoldStats out = fold_stats_;
  for (const auto& [name, folding] : folding_) {
    out.waiting += folding.queue.size();
  }
  return out;
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
    return groups_->Remove(change.name, generation).status();
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
            ? groups_->Update(existing, *std::move(spec), generation)
            : groups_->Add(*std::move(spec), generation);
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
  if (!store_->revision_generations() && expected_revision != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_revision: the ", store_->type(), " store ",
                     store_->location(), " has no revisions (leave it 0)"));
  }
  Pending mine{.expected_revision = expected_revision,
               .on_conflict = on_conflict,
               .edit = &edit};
  fold_mu_.Lock();
  Folding& folding = folding_[name];
  ++folding.callers;
  folding.queue.push_back(&mine);
  for (;;) {
    fold_mu_.Await([&] {
      fold_mu_.AssertHeld();
      return mine.result.has_value() || !folding.running;
    });
    if (mine.result.has_value()) {
      break;
    }
    // No round is running: this caller leads the next one, for the first
    // waiting edit and, when it commutes, the commuting ones behind it.
    std::vector<Pending*> round = {folding.queue.front()};
    if (round.front()->commutes()) {
      for (size_t i = 1; i < folding.queue.size() && round.size() < kMaxFold &&
                         folding.queue[i]->commutes();
           ++i) {
        round.push_back(folding.queue[i]);
      }
    }
    folding.running = true;
    fold_mu_.Unlock();
    std::vector<std::optional<absl::StatusOr<Written>>> answers =
        RunRound(name, round);
    fold_mu_.Lock();
    size_t written = 0;
    for (size_t i = 0; i < round.size(); ++i) {
      if (answers[i].has_value()) {
        written += answers[i]->ok() ? 1 : 0;
        round[i]->result = std::move(answers[i]);
      }
    }
    folding.queue.erase(
        std::remove_if(folding.queue.begin(), folding.queue.end(),
                       [](const Pending* p) { return p->result.has_value(); }),
        folding.queue.end());
    folding.running = false;
    ++fold_stats_.rounds;
    if (written > 1) {
      fold_stats_.folded += written - 1;
      if (metrics_ != nullptr) {
        metrics_->store_writes_folded.Increment(
            static_cast<double>(written - 1));
      }
    }
  }
  absl::StatusOr<Written> out = *std::move(mine.result);
  if (--folding.callers == 0) {
    folding_.erase(name);
  }
  fold_mu_.Unlock();
  return out;
}

std::vector<std::optional<absl::StatusOr<StoreSync::Written>>>
StoreSync::RunRound(const std::string& name,
                    const std::vector<Pending*>& round) {
  std::vector<std::optional<absl::StatusOr<Written>>> answers(round.size());
  // A store without revisions has this process as its only writer (and
  // Mutate serialises the writes of each name): its view is the store.
  const bool shared = store_->revision_generations();
  const Pending& head = *round.front();
  Read current = ReadLocal(name);
  bool fresh = false;
  auto refresh = [&]() -> absl::Status {
    ASIDE_ASSIGN_OR_RETURN(current, ReadFromStore(name));
    fresh = true;
    return absl::OkStatus();
  };
  if (shared && head.expected_revision != 0 &&
      current.revision != head.expected_revision) {
    if (absl::Status s = refresh(); !s.ok()) {
      answers[0] = s;
      return answers;
    }
  }
  for (int attempt = 1;; ++attempt) {
    if (head.expected_revision != 0 &&
        current.revision != head.expected_revision) {
      answers[0] = absl::AbortedError(
          absl::StrCat("group '", name, "' is at store revision ",
                       current.revision, ", not the expected ",
                       head.expected_revision, "; read it again and retry"));
      return answers;
    }
    absl::StatusOr<std::optional<GroupSpec>> first =
        (*head.edit)(current.spec.get());
    if (!first.ok()) {
      if (shared && !fresh &&
          (absl::IsNotFound(first.status()) ||
           absl::IsAlreadyExists(first.status()))) {
        // This replica may not have seen a write made through another
        // one yet: decide on the store's own value.
        if (absl::Status s = refresh(); !s.ok()) {
          answers[0] = s;
          return answers;
        }
        continue;
      }
      answers[0] = first.status();
      return answers;
    }
    std::optional<GroupSpec> value = *std::move(first);
    std::vector<size_t> in_write = {0};
    if (head.commutes() && value.has_value()) {
      // The round's other edits (all commuting), each on the one before.
      // One that fails or deletes here waits for the next round.
      for (size_t i = 1; i < round.size(); ++i) {
        absl::StatusOr<std::optional<GroupSpec>> next =
            (*round[i]->edit)(&*value);
        if (!next.ok() || !next->has_value()) {
          continue;
        }
        value = *std::move(next);
        in_write.push_back(i);
      }
    }
    absl::StatusOr<Written> written =
        Write(name, std::move(value), current.revision);
    if (absl::IsAborted(written.status()) && shared && head.commutes() &&
        attempt < kMaxWriteAttempts) {
      // The store moved on: every edit of the round runs again on its
      // value.
      if (absl::Status s = refresh(); !s.ok()) {
        written = s;
      } else {
        continue;
      }
    }
    for (size_t i : in_write) {
      answers[i] = written;
    }
    return answers;
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
      ASIDE_ASSIGN_OR_RETURN(const uint64_t generation, groups_->Remove(name));
      return Written{.generation = generation};
    }
    ASIDE_RETURN_IF_ERROR(ApplyLocked({.name = name, .revision = written}));
    return Written{.generation = GenerationFor(written), .revision = written};
  }
  GroupSpec spec = *std::move(next);
  auto own = std::make_shared<const GroupSpec>(spec);
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
  return Written{
      .group = std::move(group), .spec = std::move(own), .revision = written};
}

}  // namespace aside::server
