// aside-server: flags and wiring only.
#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "lib/address.h"
#include "lib/command_line.h"
#include "server/base/log.h"
#include "server/config/config.h"
#include "server/config_check.h"
#include "server/config_reloader.h"
#include "server/embedded_config.h"
#include "server/net/resource_limits.h"
#include "server/server.h"
#include "server/store/store_transfer.h"

namespace {

// A flag that overrides a config-file field when given, even with an empty
// value (`--metrics ""` disables the endpoint), which std::optional flags
// cannot express: abseil reads an empty value as "unset".
struct Override {
  std::optional<std::string> value;
};
bool AbslParseFlag(absl::string_view text, Override* out, std::string*) {
  out->value = std::string(text);
  return true;
}
std::string AbslUnparseFlag(const Override& in) {
  return in.value.value_or("");
}

}  // namespace

ABSL_FLAG(std::string, config, "", "YAML config file");
ABSL_FLAG(Override, listen, {}, "gRPC address");
ABSL_FLAG(Override, metrics, {}, "Prometheus /metrics address");
ABSL_FLAG(Override, state_dir, {}, "directory for durable state");
ABSL_FLAG(Override, health_listen, {},
          "extra plaintext port serving only grpc.health.v1");
ABSL_FLAG(Override, admin_token_file, {}, "bearer tokens for aside.v1.Admin");
ABSL_FLAG(Override, store, {},
          "sqlite, or etcd:HOST:PORT[,HOST:PORT...] (overrides store:)");
ABSL_FLAG(Override, advertise_address, {},
          "host:port peers dial (overrides fleet.advertise_address)");
ABSL_FLAG(Override, log_format, {}, "text or json");
ABSL_FLAG(Override, log_level, {}, "debug, info, warn or error");
ABSL_FLAG(std::string, export_state, "",
          "write the store's Admin-created groups to FILE (JSON), exit");
ABSL_FLAG(std::string, import_state, "",
          "create the groups of FILE (from --export-state) in the store, "
          "exit");
ABSL_FLAG(std::string, check_config, "",
          "validate the file, print every error, exit");
ABSL_FLAG(bool, allow_readable_secrets, false,
          "start even when a secret file the config names is readable by "
          "every user (each is logged as a warning)");

namespace {

constexpr absl::string_view kUsage = R"(usage: aside-server [flags]

  --config FILE         YAML config (default: the embedded demo config,
                        examples/aside.yaml)
  --listen HOST:PORT    gRPC address (default 0.0.0.0:50051; port 0 picks one)
  --metrics HOST:PORT   Prometheus /metrics address (default 0.0.0.0:9464;
                        "" disables)
  --state-dir DIR       directory for durable state (default ./var)
  --health-listen HOST:PORT  extra plaintext port serving only grpc.health.v1
  --admin-token-file FILE    bearer tokens for aside.v1.Admin ("TOKEN ROLE"
                        per line, role admin or read)
  --store STORE         where Admin-created groups live: sqlite (the state
                        directory) or etcd:HOST:PORT[,HOST:PORT...] (the
                        fleet's etcd; other store.etcd settings from the
                        config file)
  --advertise-address HOST:PORT  with the etcd store: where the other
                        replicas dial this one (e.g. the pod IP; overrides
                        fleet.advertise_address)
  --log-format FORMAT   text (key=value) or json
  --log-level LEVEL     debug, info, warn or error
  --check-config FILE   validate FILE, print every error, exit (0 when valid)
  --allow-readable-secrets   start (and pass --check-config) even when a
                        secret file the config names (token, session key,
                        private key, credentials) is readable by every user,
                        e.g. a Kubernetes Secret mounted with the default
                        mode 0644; each is logged as a warning
  --export-state FILE   write the Admin-created groups of the configured
                        store to FILE (JSON) and exit
  --import-state FILE   create the groups of FILE in the configured store
                        (groups it already holds are left alone) and exit;
                        with the two, groups move between a SQLite state
                        directory and etcd
  --version             print the version and exit
  --help                this text

Flags override the config file.
)";

// Secret files every user may read: refused (each named on stderr with its
// mode and the fix) unless --allow-readable-secrets, with which
// --check-config prints them as warnings and the server logs them at start.
// False when refused.
bool ReportReadableSecrets(const aside::server::ServerConfig& config,
                           absl::string_view prefix) {
  const std::vector<std::string> readable =
      aside::server::SecretFilesReadableByOthers(config);
  if (absl::GetFlag(FLAGS_allow_readable_secrets)) {
    if (prefix.empty()) {  // --check-config
      for (const std::string& r : readable) {
        std::cerr << "warning: " << r << "\n";
      }
    }
    return true;
  }
  for (const std::string& r : readable) {
    std::cerr << prefix << r << "\n";
  }
  if (!readable.empty()) {
    std::cerr << prefix
              << "refusing secret files every user may read; pass "
                 "--allow-readable-secrets to accept them\n";
  }
  return readable.empty();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aside::server;
  const std::string version = absl::StrCat("aside-server ", ASIDE_VERSION);
  if (absl::StatusOr<std::vector<std::string>> args = aside::ParseCommandLine(
          argc, argv, {.usage = kUsage, .version = version});
      !args.ok()) {
    std::cerr << "aside-server: " << args.status().message() << "\n";
    return 2;
  }
  const std::string config_file = absl::GetFlag(FLAGS_config);
  const std::string check_config = absl::GetFlag(FLAGS_check_config);

  if (!check_config.empty()) {
    absl::StatusOr<ServerConfig> config = LoadConfigFile(check_config);
    if (!config.ok()) {
      std::cerr << config.status().message() << "\n";
      return 1;
    }
    if (absl::Status s = CheckReferencedFiles(*config); !s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    if (!ReportReadableSecrets(*config, "")) {
      return 1;
    }
    std::cout << check_config << ": ok (" << config->groups.size()
              << " groups)\n";
    return 0;
  }

  // The file's bytes are read once: the reloader compares later contents
  // with these, so an edit made while the server starts is not missed.
  absl::StatusOr<std::string> config_text = config_file.empty()
                                                ? std::string(kEmbeddedConfig)
                                                : ReadConfigFile(config_file);
  absl::StatusOr<ServerConfig> config =
      !config_text.ok()     ? absl::StatusOr<ServerConfig>(config_text.status())
      : config_file.empty() ? ParseConfig(*config_text, "<embedded aside.yaml>")
                            : ParseConfig(*config_text, config_file);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 1;
  }
  // The flags win over the file, at start-up and on every reload.
  const auto apply_flags = [](ServerConfig& c) {
    auto override = [](const absl::Flag<Override>& flag, std::string* field) {
      if (std::optional<std::string> value = absl::GetFlag(flag).value) {
        *field = *std::move(value);
      }
    };
    override(FLAGS_listen, &c.listen);
    override(FLAGS_metrics, &c.metrics);
    override(FLAGS_state_dir, &c.state_dir);
    override(FLAGS_log_format, &c.log_format);
    override(FLAGS_health_listen, &c.health_listen);
    override(FLAGS_admin_token_file, &c.admin_token_file);
    override(FLAGS_log_level, &c.log_level);
    override(FLAGS_advertise_address, &c.fleet.advertise_address);
    if (std::optional<std::string> store = absl::GetFlag(FLAGS_store).value) {
      (void)ApplyStoreFlag(*store, &c.store);  // checked once at start-up
    }
  };
  const std::optional<std::string> store_flag =
      absl::GetFlag(FLAGS_store).value;
  if (store_flag) {
    if (absl::Status s = ApplyStoreFlag(*store_flag, &config->store); !s.ok()) {
      std::cerr << "aside-server: " << s.message() << "\n";
      return 2;
    }
  }
  if (std::optional<std::string> advertise =
          absl::GetFlag(FLAGS_advertise_address).value;
      advertise && !advertise->empty()) {
    if (absl::StatusOr<aside::Address> a = aside::ParseAddress(*advertise);
        !a.ok()) {
      std::cerr << "aside-server: --advertise-address: " << a.status().message()
                << "\n";
      return 2;
    }
  }
  apply_flags(*config);
  if (config->log_format != "text" && config->log_format != "json") {
    std::cerr << "aside-server: --log-format: expected text or json\n";
    return 2;
  }
  absl::StatusOr<LogLevel> level = ParseLogLevel(config->log_level);
  if (!level.ok()) {
    std::cerr << "aside-server: --log-level: " << level.status().message()
              << "\n";
    return 2;
  }
  SetLogLevel(*level);
  SetLogJson(config->log_format == "json");

  const std::string export_state = absl::GetFlag(FLAGS_export_state);
  const std::string import_state = absl::GetFlag(FLAGS_import_state);
  if (!export_state.empty() || !import_state.empty()) {
    Metrics metrics;
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(*config, &metrics);
    if (!store.ok()) {
      std::cerr << "aside-server: " << store.status().message() << "\n";
      return 1;
    }
    if (!export_state.empty()) {
      absl::StatusOr<size_t> n = ExportState(**store, export_state);
      if (!n.ok()) {
        std::cerr << "aside-server: " << n.status().message() << "\n";
        return 1;
      }
      std::cout << export_state << ": " << *n << " groups exported from "
                << (*store)->location() << "\n";
      return 0;
    }
    absl::StatusOr<ImportResult> r = ImportState(**store, import_state);
    if (!r.ok()) {
      std::cerr << "aside-server: " << r.status().message() << "\n";
      return 1;
    }
    std::cout << import_state << ": " << r->imported.size()
              << " groups imported into " << (*store)->location();
    if (!r->skipped.empty()) {
      std::cout << "; already there, left alone: "
                << absl::StrJoin(r->skipped, ", ");
    }
    std::cout << "\n";
    return 0;
  }

  if (absl::StatusOr<FileLimit> files = RaiseFileLimit(); files.ok()) {
    Log(LogLevel::kInfo, "limits.open_files",
        {{"soft", absl::StrCat(files->after)},
         {"was", absl::StrCat(files->before)},
         {"hard", absl::StrCat(files->hard)}});
  } else {
    Log(LogLevel::kWarn, "limits.open_files",
        {{"error", std::string(files.status().message())}});
  }

  // Block the shutdown and reload signals in every thread; the main thread
  // waits for them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (!ReportReadableSecrets(*config, "aside-server: ")) {
    return 1;
  }
  const size_t group_count = config->groups.size();
  const ServerConfig started_with = *config;
  absl::StatusOr<std::unique_ptr<AsideServer>> server =
      AsideServer::Create(*std::move(config));
  if (!server.ok()) {
    Log(LogLevel::kError, "startup.failed",
        {{"error", std::string(server.status().message())}});
    return 1;
  }
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    Log(LogLevel::kError, "startup.failed",
        {{"error", std::string(s.message())}});
    return 1;
  }
  Log(LogLevel::kInfo, "server.started",
      {{"version", ASIDE_VERSION},
       {"groups", absl::StrCat(group_count)},
       {"config", config_file.empty() ? "<embedded>" : config_file}});

  // The config file is followed from here on (SIGHUP, and its content when
  // config_reload.watch); the embedded config has nothing to follow.
  std::unique_ptr<ConfigReloader> reloader;
  if (!config_file.empty()) {
    reloader = std::make_unique<ConfigReloader>(
        ConfigReloader::Options{.path = config_file,
                                .adjust = apply_flags,
                                .started_from = *std::move(config_text),
                                .events = (*server)->events()},
        started_with, &(*server)->groups(), &(*server)->metrics());
    reloader->Start();
  }

  int signal_number = 0;
  while (true) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) {
      break;
    }
    if (reloader == nullptr) {
      Log(LogLevel::kWarn, "config.reload_skipped",
          {{"reason", "running the embedded config; no file to reload"}});
      continue;
    }
    (void)reloader->Reload("sighup");  // logged and counted inside
  }
  const absl::Duration grace = reloader != nullptr
                                   ? reloader->running().shutdown_grace
                                   : started_with.shutdown_grace;
  if (reloader != nullptr) {
    reloader->Stop();
  }
  Log(LogLevel::kInfo, "server.stopping",
      {{"signal", strsignal(signal_number)},
       {"grace", absl::FormatDuration(grace)}});
  (*server)->Shutdown(grace);
  (*server)->Wait();
  server->reset();
  Log(LogLevel::kInfo, "server.stopped");
  return 0;
}
