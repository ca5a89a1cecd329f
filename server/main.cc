// aside-server: flags and wiring only.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "server/config.h"
#include "server/embedded_config.h"
#include "server/log.h"
#include "server/server.h"

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
  --log-format FORMAT   text (key=value) or json
  --log-level LEVEL     debug, info, warn or error
  --check-config FILE   validate FILE, print every error, exit (0 when valid)
  --version             print the version and exit
  --help                this text

Flags override the config file.
)";

struct Flags {
  std::string config;
  std::optional<std::string> listen, metrics, state_dir, log_format, log_level,
      health_listen, admin_token_file;
  std::string check_config;
};

// Parses "--name value" and "--name=value".
bool ParseFlags(int argc, char** argv, Flags* flags, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg == "--version") {
      std::cout << "aside-server " << ASIDE_VERSION << "\n";
      std::exit(0);
    }
    std::string name(arg);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    auto take = [&]() -> std::optional<std::string> {
      if (has_value) {
        return value;
      }
      if (i + 1 >= argc) {
        *error = absl::StrCat(name, ": missing value");
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    std::optional<std::string> v;
    if (name == "--config") {
      if (!(v = take())) return false;
      flags->config = *v;
    } else if (name == "--listen") {
      if (!(v = take())) return false;
      flags->listen = *v;
    } else if (name == "--metrics") {
      if (!(v = take())) return false;
      flags->metrics = *v;
    } else if (name == "--state-dir") {
      if (!(v = take())) return false;
      flags->state_dir = *v;
    } else if (name == "--health-listen") {
      if (!(v = take())) return false;
      flags->health_listen = *v;
    } else if (name == "--admin-token-file") {
      if (!(v = take())) return false;
      flags->admin_token_file = *v;
    } else if (name == "--log-format") {
      if (!(v = take())) return false;
      flags->log_format = *v;
    } else if (name == "--log-level") {
      if (!(v = take())) return false;
      flags->log_level = *v;
    } else if (name == "--check-config") {
      if (!(v = take())) return false;
      flags->check_config = *v;
    } else {
      *error = absl::StrCat("unknown flag '", arg, "' (see --help)");
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aside::server;
  Flags flags;
  std::string error;
  if (!ParseFlags(argc, argv, &flags, &error)) {
    std::cerr << "aside-server: " << error << "\n";
    return 2;
  }

  if (!flags.check_config.empty()) {
    absl::StatusOr<ServerConfig> config = LoadConfigFile(flags.check_config);
    if (!config.ok()) {
      std::cerr << config.status().message() << "\n";
      return 1;
    }
    std::cout << flags.check_config << ": ok (" << config->groups.size()
              << " groups)\n";
    return 0;
  }

  absl::StatusOr<ServerConfig> config =
      flags.config.empty() ? ParseConfig(kEmbeddedConfig, "<embedded aside.yaml>")
                           : LoadConfigFile(flags.config);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 1;
  }
  if (flags.listen) config->listen = *flags.listen;
  if (flags.metrics) config->metrics = *flags.metrics;
  if (flags.state_dir) config->state_dir = *flags.state_dir;
  if (flags.log_format) config->log_format = *flags.log_format;
  if (flags.health_listen) config->health_listen = *flags.health_listen;
  if (flags.admin_token_file) config->admin_token_file = *flags.admin_token_file;
  if (flags.log_level) config->log_level = *flags.log_level;
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

  // Block the shutdown signals in every thread; the main thread waits for
  // them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const absl::Duration grace = config->shutdown_grace;
  const size_t group_count = config->groups.size();
  absl::StatusOr<std::unique_ptr<AsideServer>> server =
      AsideServer::Create(*std::move(config));
  if (!server.ok()) {
    Log(LogLevel::kError, "startup.failed",
        {{"error", std::string(server.status().message())}});
    return 1;
  }
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    Log(LogLevel::kError, "startup.failed", {{"error", std::string(s.message())}});
    return 1;
  }
  Log(LogLevel::kInfo, "server.started",
      {{"version", ASIDE_VERSION},
       {"groups", absl::StrCat(group_count)},
       {"config", flags.config.empty() ? "<embedded>" : flags.config}});

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  Log(LogLevel::kInfo, "server.stopping",
      {{"signal", strsignal(signal_number)},
       {"grace", absl::FormatDuration(grace)}});
  (*server)->Shutdown(grace);
  (*server)->Wait();
  server->reset();
  Log(LogLevel::kInfo, "server.stopped");
  return 0;
}
