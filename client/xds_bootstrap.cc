#include "client/xds_bootstrap.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace aside {
namespace {

// A JSON string literal of `s` (quotes, backslashes and control characters
// escaped).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace

absl::StatusOr<std::string> XdsBootstrapJson(
    const XdsBootstrapOptions& options) {
  const size_t colon = options.server.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(options.server).substr(colon + 1),
                        &port) ||
      port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server: '", options.server, "' is not HOST:PORT"));
  }
  if (options.node_id.empty()) {
    return absl::InvalidArgumentError("--node-id: must not be empty");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key: give both or neither");
  }
  if (!options.tls_cert_file.empty() && options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca: a client certificate needs the CA that verifies Aside");
  }
  std::string creds = R"([{"type": "insecure"}])";
  if (!options.tls_ca_file.empty()) {
    std::string config =
        absl::StrCat("\"ca_certificate_file\": ", Quote(options.tls_ca_file));
    if (!options.tls_cert_file.empty()) {
      absl::StrAppend(&config,
                      ", \"certificate_file\": ", Quote(options.tls_cert_file),
                      ", \"private_key_file\": ", Quote(options.tls_key_file));
    }
    creds = absl::StrCat(R"([{"type": "tls", "config": {)", config, "}}]");
  }
  return absl::StrCat(
      "{\n"
      "  \"xds_servers\": [{\n"
      "    \"server_uri\": ",
      Quote(options.server), ",\n", "    \"channel_creds\": ", creds, ",\n",
      "    \"server_features\": [\"xds_v3\", \"ignore_resource_deletion\"]\n"
      "  }],\n"
      "  \"node\": {\n"
      "    \"id\": ",
      Quote(options.node_id),
      ",\n"
      "    \"locality\": {\"region\": ",
      Quote(options.region), ", \"zone\": ", Quote(options.zone),
      ", \"sub_zone\": ", Quote(options.sub_zone),
      "}\n"
      "  }\n"
      "}\n");
}

}  // namespace aside
