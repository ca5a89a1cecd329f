#include "server/config_reloader.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "lib/thread_name.h"
#include "server/base/log.h"

namespace aside::server {
namespace {

// The file's content, or an error naming it.
// What the last read saw when it failed: distinct from any file content (a
// file holds no NUL-prefixed text that is also an error message), so one
// missing file is reported once, not every interval.
std::string ReadErrorMarker(const absl::Status& status) {
  return absl::StrCat(std::string(1, '\0'), status.ToString());
}

void ApplyLogSettings(const ServerConfig& config) {
  if (absl::StatusOr<LogLevel> level = ParseLogLevel(config.log_level);
      level.ok()) {
    SetLogLevel(*level);
  }
  SetLogJson(config.log_format == "json");
}

}  // namespace

ConfigReloader::ConfigReloader(Options options, ServerConfig running,
                               GroupRegistry* groups, Metrics* metrics)
    : options_(std::move(options)),
      groups_(groups),
      metrics_(metrics),
      running_(std::move(running)) {
  metrics_->config_last_reload_successful.Set(1);
  metrics_->config_last_reload_success_time.Set(
      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

ConfigReloader::~ConfigReloader() { Stop(); }

void ConfigReloader::Start() {
  {
    aside::MutexLock lock(&reload_mu_);
    if (options_.started_from.has_value()) {
      last_content_ = *options_.started_from;
    } else {
      absl::StatusOr<std::string> content = ReadConfigFile(options_.path);
      last_content_ = content.ok() ? *std::move(content)
                                   : ReadErrorMarker(content.status());
    }
    have_content_ = true;
  }
  watcher_ = std::thread([this] {
    NameThisThread("aside-reload");
    Watch();
  });
}

void ConfigReloader::Stop() {
  {
    aside::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) {
    watcher_.join();
  }
}

ServerConfig ConfigReloader::running() const {
  aside::MutexLock lock(&mu_);
  return running_;
}

void ConfigReloader::Watch() {
  while (true) {
    {
      aside::MutexLock lock(&mu_);
      // The interval and the switch are live settings: read them afresh.
      const absl::Duration interval = running_.reload_interval;
      if (mu_.AwaitWithTimeout(aside::Cond(&stop_), interval)) {
        return;
      }
      if (!running_.reload_watch) {
        continue;
      }
    }
    absl::StatusOr<std::string> content = ReadConfigFile(options_.path);
    std::string seen =
        content.ok() ? *std::move(content) : ReadErrorMarker(content.status());
    aside::MutexLock lock(&reload_mu_);
    if (have_content_ && seen == last_content_) {
      continue;
    }
    (void)ReloadLocked(seen, "file");
  }
}

absl::Status ConfigReloader::Reload(absl::string_view trigger) {
  absl::StatusOr<std::string> content = ReadConfigFile(options_.path);
  aside::MutexLock lock(&reload_mu_);
  return ReloadLocked(
      content.ok() ? *std::move(content) : ReadErrorMarker(content.status()),
      trigger);
}

absl::Status ConfigReloader::ReloadLocked(const std::string& content,
                                          absl::string_view trigger) {
  last_content_ = content;
  have_content_ = true;
  auto fail = [&](const absl::Status& status) {
    metrics_->config_reloads_failure.Increment();
    metrics_->config_last_reload_successful.Set(0);
    Log(LogLevel::kError, "config.reload_failed",
        {{"file", options_.path},
         {"trigger", std::string(trigger)},
         {"error", std::string(status.message())}});
    if (options_.events != nullptr) {
      options_.events->Record(EventKind::kConfigReloadFailed, "", "",
                              status.message());
    }
    return status;
  };
  absl::StatusOr<ServerConfig> next = absl::InternalError("unread");
  if (!content.empty() && content.front() == '\0') {
    next = absl::FailedPreconditionError(content.substr(1));
  } else {
    next = ParseConfig(content, options_.path);
  }
  if (!next.ok()) {
    return fail(next.status());
  }
  if (options_.adjust) {
    options_.adjust(*next);
  }
  const ServerConfig before = running();
  if (absl::Status s = ApplyGroupsLocked(*next); !s.ok()) {
    return fail(s);
  }

  // The live settings; the rest stays as the server started.
  ServerConfig after = before;
  AdoptLiveSettings(*next, &after);
  ApplyLogSettings(after);
  {
    aside::MutexLock lock(&mu_);
    running_ = after;
  }

  const std::vector<std::string> restart = RestartOnlyChanges(before, *next);
  metrics_->config_restart_required.Set(restart.empty() ? 0 : 1);
  if (!restart.empty()) {
    Log(LogLevel::kWarn, "config.restart_required",
        {{"file", options_.path},
         {"settings", absl::StrJoin(restart, ",")},
         {"detail",
          "these settings keep their start-up values until a restart"}});
  }
  metrics_->config_reloads_success.Increment();
  metrics_->config_last_reload_successful.Set(1);
  metrics_->config_last_reload_success_time.Set(
      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  Log(LogLevel::kInfo, "config.reloaded",
      {{"file", options_.path},
       {"trigger", std::string(trigger)},
       {"groups", absl::StrCat(after.groups.size())}});
  if (options_.events != nullptr) {
    options_.events->Record(
        EventKind::kConfigReloaded, "", "",
        absl::StrCat(trigger, ": ", after.groups.size(), " file groups"));
  }
  return absl::OkStatus();
}

absl::Status ConfigReloader::ApplyGroupsLocked(const ServerConfig& next) {
  // Plan first, so that a reload the registry would refuse changes nothing.
  std::vector<std::string> errors;
  std::map<std::string, const GroupSpec*> wanted;
  std::vector<const GroupSpec*> added;
  std::vector<std::pair<GroupPtr, const GroupSpec*>> updated;
  for (size_t i = 0; i < next.groups.size(); ++i) {
    const GroupSpec& spec = next.groups[i];
    wanted.emplace(spec.name, &spec);
    GroupPtr group = groups_->Find(spec.name);
    if (group == nullptr) {
      added.push_back(&spec);
    } else if (group->spec_snapshot()->source != GroupSource::kFile) {
      const int line = i < next.group_lines.size() ? next.group_lines[i] : 0;
      errors.push_back(absl::StrCat(
          next.groups[i].file, ":", line, ": groups[", i, "].name: group '",
          spec.name,
          "' exists, created through the Admin API; delete it there or "
          "rename this one"));
    } else if (*group->spec_snapshot() != spec) {
      updated.emplace_back(std::move(group), &spec);
    }
  }
  std::vector<std::string> removed;
  std::vector<std::shared_ptr<const GroupSpec>> others;  // not the file's
  for (const GroupPtr& group : groups_->List()) {
    std::shared_ptr<const GroupSpec> current = group->spec_snapshot();
    if (current->source != GroupSource::kFile) {
      others.push_back(std::move(current));
    } else if (!wanted.contains(group->name())) {
      removed.push_back(group->name());
    }
  }
  // The whole namespace at once: every group of the file against every
  // group it does not own (Admin's, stored), so that a collision the
  // registry would refuse at one step refuses the reload before any step.
  // (The file's groups were checked against each other when it parsed.)
  for (size_t i = 0; i < next.groups.size(); ++i) {
    const GroupSpec& spec = next.groups[i];
    for (const std::shared_ptr<const GroupSpec>& other : others) {
      if (other->name == spec.name) {
        continue;  // reported above
      }
      if (absl::Status s = CheckGroupNamespace(spec, *other); !s.ok()) {
        const int line = i < next.group_lines.size() ? next.group_lines[i] : 0;
        errors.push_back(absl::StrCat(next.groups[i].file, ":", line,
                                      ": groups[", i, "].", s.message()));
        break;
      }
    }
  }
  const size_t max_groups = running().max_groups;
  const size_t total = groups_->size() - removed.size() + added.size();
  if (total > max_groups) {
    errors.push_back(absl::StrCat(options_.path, ": groups: ", total,
                                  " groups after the reload (limits."
                                  "max_groups is ",
                                  max_groups, ")"));
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }

  // Removals first (they free room under max_groups), then updates, then
  // additions. The registry can still refuse a step only when an Admin call
  // took a name or alias between the plan and the step: it is reported,
  // the others go ahead.
  for (const std::string& name : removed) {
    if (absl::Status s = groups_->Remove(name).status(); !s.ok()) {
      errors.push_back(absl::StrCat("group '", name, "': ", s.message()));
      continue;
    }
    Log(LogLevel::kInfo, "config.group_removed", {{"group", name}});
  }
  for (const auto& [group, spec] : updated) {
    if (absl::Status s = groups_->Update(group, *spec); !s.ok()) {
      errors.push_back(absl::StrCat("group '", spec->name, "': ", s.message()));
      continue;
    }
    Log(LogLevel::kInfo, "config.group_updated",
        {{"group", spec->name},
         {"generation", absl::StrCat(group->table()->generation())}});
  }
  for (const GroupSpec* spec : added) {
    if (absl::Status s = groups_->Add(*spec); !s.ok()) {
      errors.push_back(absl::StrCat("group '", spec->name, "': ", s.message()));
      continue;
    }
    Log(LogLevel::kInfo, "config.group_added", {{"group", spec->name}});
  }
  if (!errors.empty()) {
    return absl::AbortedError(absl::StrCat(
        options_.path,
        ": reload applied in part: ", absl::StrJoin(errors, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace aside::server
