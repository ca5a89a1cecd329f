// asidectl: Aside from the command line, for people without grpcurl.
// This file holds the usage text and main: the command line, the server
// and the Admin token, the channel, and the dispatch to Ctl (ctl.h), or
// to xds-bootstrap, which needs no channel.
//
// Exit codes: 0 success, 1 the RPC failed (the gRPC status is printed),
// 2 usage errors (unknown command or flag, missing argument, unreadable
// file).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/credentials.h"
#include "client/xds_bootstrap.h"
#include "lib/command_line.h"
#include "tools/asidectl/ctl.h"
#include "tools/asidectl/flags.h"
#include "tools/asidectl/format.h"

namespace aside::asidectl {
namespace {

constexpr char kUsage[] = R"(usage: asidectl [flags] COMMAND [args]

commands:
  status                          the fleet at a glance: groups, then every
                                  backend with health, last probe, drain,
                                  ejection and load
  groups                          list groups
  group NAME                      show a group with its backends and their state
  targets [GROUP]                 list health-check targets (of one group)
  members                         list the fleet's live replicas (etcd store):
                                  id, address, targets probed, lease age
  pick GROUP [KEY] [--count N]    ask the server for a backend
  watch GROUP... [--updates N]    print weight-table updates as they arrive
  create-group FILE               create the group(s) in a JSON or YAML file
                                  (a Group, {"group": ...}, or {"groups": [...]})
  create-group NAME --backend ADDR[=WEIGHT]... [--policy P] [--health-check KIND]
  delete-group NAME
  add-backend GROUP ADDR[=WEIGHT]...
  remove-backend GROUP ADDR...
  drain GROUP ADDR...
  undrain GROUP ADDR...
  drain GROUP --self PORT... [--self-ip IP]
  undrain GROUP --self PORT... [--self-ip IP]
                                  the backend(s) at this host's own IP
                                  (--self-ip, default $POD_IP) and PORT(s): what
                                  a backend's preStop hook runs with a
                                  self-drain token; exit 0 once the server
                                  acknowledged the drain
  drain --wait [--timeout 30s] GROUP ADDR... (or --self PORT...)
                                  drain, then wait until every client of the
                                  group on that server confirmed it and no
                                  stub reports calls in flight to it; prints
                                  progress; exit 0 when drained, 1 at the
                                  timeout naming who has not confirmed
  apply-changes FILE              apply many changes in one call, each with its
                                  own result (YAML or JSON: {changes: [
                                  {drain_backends: {group: G, addresses: [A],
                                  drained: true}}, ...]}; FILE - reads stdin;
                                  exit 1 if any change failed)
  xds-bootstrap [--node-id ID] [--region R --zone Z --sub-zone S]
                [--tls-ca CA [--tls-cert CRT --tls-key KEY]]
                                  print a bootstrap for stock gRPC xDS clients
                                  (xds:///GROUP) that names --server

flags:
  --server HOST:PORT     Aside server (default $ASIDE_SERVER or localhost:50051)
  --token TOKEN          Admin bearer token (default $ASIDE_TOKEN)
  --token-file FILE      read the token from FILE (the first word of its first
                         non-comment line, as in a server token file; default
                         $ASIDE_TOKEN_FILE; `make run` writes
                         var/demo-admin-token)
  --tls                  use TLS (implied by the other --tls-* flags)
  --tls-ca FILE          CA certificate (PEM) to verify the server
  --tls-cert FILE        client certificate (PEM), with --tls-key, for mTLS
  --tls-key FILE         client key (PEM)
  --tls-server-name NAME name to verify the server certificate against
  --json                 print protobuf JSON instead of tables
  --timeout DURATION     per-call deadline (default 10s; watch has none)
  --watch                status, groups, group, targets: redraw every
                         --interval (default 2s) until Ctrl-C (or --updates N
                         redraws)
)";

// The Admin token: --token, else $ASIDE_TOKEN, else the first token of
// --token-file or $ASIDE_TOKEN_FILE; empty when none is given.
absl::StatusOr<std::string> AdminToken() {
  if (std::string token = absl::GetFlag(FLAGS_token); !token.empty()) {
    return token;
  }
  if (const char* env = std::getenv("ASIDE_TOKEN");
      env != nullptr && *env != '\0') {
    return std::string(env);
  }
  std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) {
    const char* env = std::getenv("ASIDE_TOKEN_FILE");
    path = env != nullptr ? env : "";
  }
  if (path.empty()) {
    return std::string();
  }
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("--token-file: ", path, ": cannot open"));
  }
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') {
      continue;
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    return std::string(words[0]);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("--token-file: ", path, ": no token in it"));
}

// xds-bootstrap: prints the bootstrap that names `server`. It makes no
// call (the bootstrap is for other clients), so it needs neither a channel
// nor a token; --tls-ca/--tls-cert/--tls-key name the files the client
// will read.
int XdsBootstrap(const std::string& server) {
  XdsBootstrapOptions options{.server = server,
                              .region = absl::GetFlag(FLAGS_region),
                              .zone = absl::GetFlag(FLAGS_zone),
                              .sub_zone = absl::GetFlag(FLAGS_sub_zone),
                              .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
                              .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
                              .tls_key_file = absl::GetFlag(FLAGS_tls_key)};
  if (!absl::GetFlag(FLAGS_node_id).empty()) {
    options.node_id = absl::GetFlag(FLAGS_node_id);
  }
  absl::StatusOr<std::string> json = XdsBootstrapJson(options);
  if (!json.ok()) {
    Say(absl::StrCat("asidectl: xds-bootstrap: ", json.status().message()));
    return 2;
  }
  std::cout << *json << (absl::EndsWith(*json, "\n") ? "" : "\n");
  return 0;
}

int Main(int argc, char** argv) {
  absl::StatusOr<std::vector<std::string>> positional =
      ParseCommandLine(argc, argv, {.usage = kUsage, .positional = true});
  if (!positional.ok()) {
    Say(absl::StrCat("asidectl: ", positional.status().message(), "\n\n",
                     kUsage));
    return 2;
  }
  if (positional->empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) {
    const char* env = std::getenv("ASIDE_SERVER");
    server = env != nullptr && *env != '\0' ? env : "localhost:50051";
  }
  if ((*positional)[0] == "xds-bootstrap") {
    return XdsBootstrap(server);
  }
  TlsOptions tls;
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  tls.enabled = absl::GetFlag(FLAGS_tls) || !tls.ca_file.empty() ||
                !tls.cert_file.empty() || !tls.key_file.empty() ||
                !tls.server_name.empty();
  if (absl::GetFlag(FLAGS_interval) < absl::Milliseconds(100)) {
    Say("asidectl: --interval: at least 100ms");
    return 2;
  }
  // --watch waits for Ctrl-C (and SIGTERM) with sigtimedwait between
  // redraws: block them before gRPC starts its threads, so that none of
  // those takes the signal and the process ends through Redraw's return.
  if (absl::GetFlag(FLAGS_watch)) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  }
  if (std::optional<absl::Duration> t = absl::GetFlag(FLAGS_timeout);
      t.has_value() && *t <= absl::ZeroDuration()) {
    Say("asidectl: --timeout: must be positive");
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeCredentials(tls);
  if (!creds.ok()) {
    Say(absl::StrCat("asidectl: ", creds.status().message()));
    return 2;
  }
  grpc::ChannelArguments channel_args;
  ApplyTlsArgs(tls, &channel_args);
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(server, *creds, channel_args);
  absl::StatusOr<std::string> token = AdminToken();
  if (!token.ok()) {
    Say(absl::StrCat("asidectl: ", token.status().message()));
    return 2;
  }
  Ctl ctl(channel, *std::move(token));
  const std::string command = (*positional)[0];
  std::vector<std::string> rest(positional->begin() + 1, positional->end());
  const int rc = ctl.Run(command, rest);
  if (rc == Ctl::kUsageError) {
    Say(absl::StrCat("asidectl: ", command, ": ", ctl.usage_error(), "\n\n",
                     kUsage));
    return 2;
  }
  return rc;
}

}  // namespace
}  // namespace aside::asidectl

int main(int argc, char** argv) { return aside::asidectl::Main(argc, argv); }
