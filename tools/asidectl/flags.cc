// asidectl's flags, with their defaults and help text (declared in
// flags.h). The usage text in main.cc is what users read; keep the two in
// step.
#include "tools/asidectl/flags.h"

#include "absl/flags/flag.h"

// Global flags.
ABSL_FLAG(std::string, server, "",
          "Aside server (default $ASIDE_SERVER or localhost:50051)");
ABSL_FLAG(std::string, token, "", "Admin bearer token (default $ASIDE_TOKEN)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the Admin token (default $ASIDE_TOKEN_FILE)");
ABSL_FLAG(bool, tls, false, "use TLS (implied by the other --tls-* flags)");
ABSL_FLAG(std::string, tls_ca, "", "CA certificate (PEM) to verify the server");
ABSL_FLAG(std::string, tls_cert, "", "client certificate (PEM) for mTLS");
ABSL_FLAG(std::string, tls_key, "", "client key (PEM)");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to verify the server certificate against");
ABSL_FLAG(bool, json, false, "print protobuf JSON instead of tables");
ABSL_FLAG(std::optional<absl::Duration>, timeout, std::nullopt,
          "per-call deadline (default 10s); drain --wait: the whole wait "
          "(default 30s)");

// pick, watch and --watch.
ABSL_FLAG(std::optional<uint32_t>, count, std::nullopt,
          "pick: how many distinct backends");
ABSL_FLAG(std::optional<int64_t>, updates, std::nullopt,
          "watch: stop after N updates; --watch: after N redraws");
ABSL_FLAG(bool, watch, false,
          "status, groups, group, targets: redraw until interrupted");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(2),
          "--watch: time between redraws");

// create-group.
ABSL_FLAG(std::vector<std::string>, backend, {},
          "create-group: ADDR[=WEIGHT], repeatable");
ABSL_FLAG(std::string, policy, "", "create-group: policy name");
ABSL_FLAG(std::string, health_check, "",
          "create-group: tcp, http, grpc or none");

// drain and undrain.
ABSL_FLAG(std::vector<std::string>, self, {},
          "drain, undrain: PORT of this host's own backend, repeatable; the "
          "address is --self-ip:PORT");
ABSL_FLAG(std::string, self_ip, "",
          "drain, undrain with --self: this host's IP (default $POD_IP)");
ABSL_FLAG(bool, wait, false,
          "drain: then wait until every client of the group on the server "
          "confirmed it (at most --timeout, default 30s here)");

// xds-bootstrap.
ABSL_FLAG(std::string, node_id, "",
          "xds-bootstrap: the node id (default aside-xds-client)");
ABSL_FLAG(std::string, region, "", "xds-bootstrap: the client's region");
ABSL_FLAG(std::string, zone, "", "xds-bootstrap: the client's zone");
ABSL_FLAG(std::string, sub_zone, "", "xds-bootstrap: the client's sub-zone");
