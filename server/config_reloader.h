// Reloading the config file while the server runs, on SIGHUP and when the
// file's content changes.
//
// The file is followed by content, not by inode or modification time: every
// `config_reload.interval` it is read through its path (following symlinks,
// so the `..data` swap of a Kubernetes ConfigMap volume, an editor's
// rename-over and an in-place write all count) and compared with the
// content last tried. A change is loaded whole by the start-up loader
// (ParseConfig), so a reload accepts exactly what start-up accepts.
//
// An invalid file changes nothing: the error (file:line) is logged, counted
// in aside_config_reloads_total{result="failure"}, and the running config
// keeps serving; the same content is not tried again until it changes or a
// SIGHUP asks. A valid file is applied:
// - config groups whose definition changed are updated (a new generation;
//   Watch streams get the delta), unchanged ones are left alone (same
//   generation, nothing published), new ones are added and those no longer
//   in the file are removed (Watch streams get GroupRemoved);
// - groups created through the Admin API are never touched, and a config
//   group whose name is taken by one fails the whole reload;
// - the live settings (log_level, log_format, shutdown_grace,
//   config_reload) take effect; every other setting (listen addresses,
//   state, limits, health, TLS file names, admin, ...) is kept as it
//   started, and a change to it is logged and shown in
//   aside_config_restart_required until the file matches again.
#ifndef ASIDE_SERVER_CONFIG_RELOADER_H_
#define ASIDE_SERVER_CONFIG_RELOADER_H_

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/sync.h"
#include "server/base/metrics.h"
#include "server/config/config.h"
#include "server/config/server_settings.h"
#include "server/groups/group_registry.h"
#include "server/status/events.h"

namespace aside::server {

// Thread rules: Reload, running and Stop from any thread; reloads are
// serialised on reload_mu_ (taken before mu_, which guards the running
// config and the watcher's stop flag). The watcher thread runs from Start
// to Stop (or destruction).
class ConfigReloader {
 public:
  struct Options {
    // The config file, as given on the command line.
    std::string path;
    // Applied to every loaded config before it is compared and applied
    // (the command line's overrides, which win over the file).
    std::function<void(ServerConfig&)> adjust;
    // The bytes the running config was parsed from. A change made after
    // they were read, even before Start, is then seen as a change; without
    // them Start reads the file, and a change made before it is missed.
    std::optional<std::string> started_from;
    // Where reloads, applied or refused, are recorded (may be null).
    EventRecorder* events = nullptr;
  };

  // `running` is the config the server started with (after `adjust`).
  ConfigReloader(Options options, ServerConfig running, GroupRegistry* groups,
                 Metrics* metrics);
  ~ConfigReloader();
  ConfigReloader(const ConfigReloader&) = delete;
  ConfigReloader& operator=(const ConfigReloader&) = delete;

  // Starts following the file, from Options::started_from (or the file as
  // it is now).
  void Start();
  // Stops following the file; waits for a reload in progress. Idempotent.
  void Stop();

  // Reads, validates and applies the file now; `trigger` names the cause in
  // the log ("sighup", "file"). OK when applied (also when nothing changed).
  absl::Status Reload(absl::string_view trigger);

  // The config in effect: the start-up settings, with the groups and live
  // settings of the last applied file.
  ServerConfig running() const;

 private:
  void Watch();
  absl::Status ReloadLocked(const std::string& content,
                            absl::string_view trigger)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  absl::Status ApplyGroupsLocked(const ServerConfig& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);

  const Options options_;
  GroupRegistry* const groups_;
  Metrics* const metrics_;

  aside::Mutex reload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The content last tried (applied or refused).
  std::string last_content_ ABSL_GUARDED_BY(reload_mu_);
  bool have_content_ ABSL_GUARDED_BY(reload_mu_) = false;

  mutable aside::Mutex mu_;
  ServerConfig running_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_CONFIG_RELOADER_H_
