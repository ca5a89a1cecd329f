// asidectl's flags: the global ones (server, token, TLS, output, deadline)
// and those of single commands, which may appear anywhere on the command
// line. Defined in flags.cc; lib/command_line.h parses them.
#ifndef ASIDE_TOOLS_ASIDECTL_FLAGS_H_
#define ASIDE_TOOLS_ASIDECTL_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/time/time.h"

// Global flags.
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(std::string, token);
ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(bool, tls);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::optional<absl::Duration>, timeout);

// pick, watch and --watch.
ABSL_DECLARE_FLAG(std::optional<uint32_t>, count);
ABSL_DECLARE_FLAG(std::optional<int64_t>, updates);
ABSL_DECLARE_FLAG(bool, watch);
ABSL_DECLARE_FLAG(absl::Duration, interval);

// create-group.
ABSL_DECLARE_FLAG(std::vector<std::string>, backend);
ABSL_DECLARE_FLAG(std::string, policy);
ABSL_DECLARE_FLAG(std::string, health_check);

// drain and undrain of the caller's own address (a backend's preStop hook).
ABSL_DECLARE_FLAG(std::vector<std::string>, self);
ABSL_DECLARE_FLAG(std::string, self_ip);
// drain --wait: until every client confirmed (Admin.WaitDrained).
ABSL_DECLARE_FLAG(bool, wait);

// xds-bootstrap (with --tls-ca, --tls-cert and --tls-key).
ABSL_DECLARE_FLAG(std::string, node_id);
ABSL_DECLARE_FLAG(std::string, region);
ABSL_DECLARE_FLAG(std::string, zone);
ABSL_DECLARE_FLAG(std::string, sub_zone);

#endif  // ASIDE_TOOLS_ASIDECTL_FLAGS_H_
