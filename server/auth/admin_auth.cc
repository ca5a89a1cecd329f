#include "server/auth/admin_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/address.h"
#include "lib/backend.h"
#include "lib/ip_network.h"
#include "server/auth/report_auth.h"
#include "server/base/client_peer.h"

namespace aside::server {
namespace {

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> out;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         out.data());
  return out;
}

absl::StatusOr<AdminRole> ParseRole(absl::string_view role) {
  if (role == "admin") {
    return AdminRole::kAdmin;
  }
  if (role == "read") {
    return AdminRole::kRead;
  }
  if (role == "report") {
    return AdminRole::kReport;
  }
  if (role == "self-drain") {
    return AdminRole::kSelfDrain;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown role '", role, "' (allowed: admin, read, report, self-drain)"));
}

absl::string_view RoleName(AdminRole role) {
  switch (role) {
    case AdminRole::kAdmin:
      return "admin";
    case AdminRole::kRead:
      return "read";
    case AdminRole::kReport:
      return "report";
    case AdminRole::kSelfDrain:
      return "self-drain";
    default:
      return "none";
  }
}

// Which role a refusal names when the caller holds several: the one that
// may do the most.
int Rank(AdminRole role) {
  switch (role) {
    case AdminRole::kAdmin:
      return 4;
    case AdminRole::kRead:
      return 3;
    case AdminRole::kReport:
      return 2;
    case AdminRole::kSelfDrain:
      return 1;
    default:
      return 0;
  }
}

// A credential name as a metric label: short, printable, no quotes.
bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-' && c != ':' && c != '@') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool RoleGrants(AdminRole have, AdminRole needed) {
  if (needed == AdminRole::kNone) {
    return true;
  }
  // self-drain grants nothing else, and nothing else grants it: what an
  // admin may drain is not bounded by its address (AuthorizeDrain).
  if (have == AdminRole::kSelfDrain || needed == AdminRole::kSelfDrain) {
    return have == needed;
  }
  if (needed == AdminRole::kReport) {
    return have == AdminRole::kReport || have == AdminRole::kAdmin;
  }
  return have != AdminRole::kReport && have >= needed;
}

absl::StatusOr<std::unique_ptr<AdminAuth>> AdminAuth::Create(
    const std::string& token_file,
    const std::vector<ServerConfig::AdminIdentity>& identities) {
  auto auth = std::unique_ptr<AdminAuth>(new AdminAuth());
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::FailedPreconditionError(
          absl::StrCat(token_file, ": cannot open admin token file"));
    }
    std::string line;
    int line_number = 0;
    // The line each token digest was first seen on.
    std::map<std::array<unsigned char, 32>, int> seen;
    while (std::getline(in, line)) {
      ++line_number;
      absl::string_view text = absl::StripAsciiWhitespace(line);
      if (text.empty() || text.front() == '#') {
        continue;
      }
      std::vector<absl::string_view> parts =
          absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (parts.size() != 2 && parts.size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            token_file, ":", line_number, ": expected 'TOKEN ROLE [NAME]'"));
      }
      std::string name = parts.size() == 3
                             ? std::string(parts[2])
                             : absl::StrCat("token:", line_number);
      if (!ValidName(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            token_file, ":", line_number, ": name '", name.substr(0, 64),
            "' must be 1..64 of [A-Za-z0-9._:@-]"));
      }
      if (parts[0].size() < 16) {
        return absl::InvalidArgumentError(
            absl::StrCat(token_file, ":", line_number,
                         ": token shorter than 16 characters"));
      }
      absl::StatusOr<AdminRole> role = ParseRole(parts[1]);
      if (!role.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            token_file, ":", line_number, ": ", role.status().message()));
      }
      const auto digest = Digest(parts[0]);
      if (auto [it, inserted] = seen.emplace(digest, line_number); !inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            token_file, ":", line_number, ": token already listed on line ",
            it->second, " (one role per token)"));
      }
      auth->tokens_.push_back({digest, *role, std::move(name)});
    }
    if (in.bad()) {
      return absl::FailedPreconditionError(
          absl::StrCat(token_file, ": read error"));
    }
    // A token file that grants nothing would start the server with Admin
    // silently closed: whoever named the file expects it to work.
    if (auth->tokens_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          token_file, ":", line_number + 1,
          ": no tokens (expected one 'TOKEN ROLE' line; to close Admin, "
          "name no token file)"));
    }
  }
  for (const ServerConfig::AdminIdentity& id : identities) {
    absl::StatusOr<AdminRole> role = ParseRole(id.role);
    if (!role.ok()) {
      return role.status();
    }
    auth->identities_.emplace_back(id.identity, *role);
  }
  return auth;
}

const AdminAuth::Token* AdminAuth::FindToken(absl::string_view token) const {
  const auto digest = Digest(token);
  const Token* found = nullptr;
  // Compare against every token, whatever matches, so timing does not say
  // which (or whether one) matched. Tokens are unique (Create checks).
  for (const Token& t : tokens_) {
    const bool equal =
        CRYPTO_memcmp(digest.data(), t.digest.data(), digest.size()) == 0;
    if (equal) {
      found = &t;
    }
  }
  return found;
}

AdminRole AdminAuth::RoleOfToken(absl::string_view token) const {
  const Token* t = FindToken(token);
  return t == nullptr ? AdminRole::kNone : t->role;
}

AdminAuth::Caller AdminAuth::Identify(const grpc::ServerContextBase& context,
                                      AdminRole needed) const {
  Caller caller;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    caller.presented = true;
    absl::string_view value(it->second.data(), it->second.size());
    if (absl::StartsWithIgnoreCase(value, "bearer ")) {
      if (const Token* t =
              FindToken(absl::StripAsciiWhitespace(value.substr(7)))) {
        caller.roles.push_back(t->role);
        if (caller.name.empty() && RoleGrants(t->role, needed)) {
          caller.name = t->name;
        }
      }
    }
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property :
         {"x509_subject_alternative_name", "peer_uri", "peer_dns",
          "peer_spiffe_id", "x509_common_name"}) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        caller.presented = true;
        absl::string_view v(value.data(), value.size());
        for (const auto& [identity, id_role] : identities_) {
          if (identity == v) {
            caller.roles.push_back(id_role);
            if (caller.name.empty() && RoleGrants(id_role, needed)) {
              caller.name = identity;
            }
          }
        }
      }
    }
  }
  return caller;
}

grpc::Status AdminAuth::Authorize(const grpc::ServerContextBase& context,
                                  AdminRole needed) const {
  const Caller caller = Identify(context, needed);
  AdminRole best = AdminRole::kNone;
  for (AdminRole role : caller.roles) {
    if (RoleGrants(role, needed)) {
      return grpc::Status::OK;
    }
    if (Rank(role) > Rank(best)) {
      best = role;
    }
  }
  if (needed == AdminRole::kNone) {
    return grpc::Status::OK;
  }
  const absl::string_view what =
      needed == AdminRole::kReport ? "load reports" : "admin";
  if (!configured()) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            absl::StrCat(what,
                         ": no credentials are configured on this server "
                         "(admin.token_file or admin.allowed_identities); ",
                         needed == AdminRole::kReport
                             ? "reports are refused (or set load_reports.auth: "
                               "open on a trusted network)"
                             : "Admin calls are refused")};
  }
  if (!caller.presented || best == AdminRole::kNone) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            absl::StrCat(what,
                         ": missing or unknown credentials (send "
                         "'authorization: Bearer <token>' metadata)")};
  }
  return {grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat(what, ": role '", RoleName(best), "' may not do this ('",
                       RoleName(needed), "' required)",
                       best == AdminRole::kSelfDrain
                           ? "; a self-drain credential may only drain or "
                             "undrain the caller's own address "
                             "(DrainBackends)"
                           : "")};
}

grpc::Status AdminAuth::AuthorizeDrain(
    const grpc::ServerContextBase& context,
    const std::vector<std::string>& addresses) const {
  grpc::Status admin = Authorize(context, AdminRole::kAdmin);
  if (admin.ok() || Identify(context, AdminRole::kSelfDrain).name.empty()) {
    return admin;
  }
  // The relay's socket name carries the client's address (ClientPeer), so
  // this is the address the connection came from, not the relay's.
  const std::string peer = ClientPeer(context.peer());
  const std::string host = ReportAuth::PeerHost(peer);
  absl::StatusOr<IpNetwork> own = ParseNetwork(host);
  if (!own.ok()) {
    return {grpc::StatusCode::PERMISSION_DENIED,
            absl::StrCat("admin: a self-drain credential drains only the "
                         "caller's own address; this call comes from '",
                         peer, "', which has no IP address")};
  }
  const std::vector<IpNetwork> mine = {*std::move(own)};
  for (const std::string& text : addresses) {
    absl::StatusOr<Address> address = ParseAddress(text);
    if (address.ok() && address->is_ip() && InNetworks(mine, address->host)) {
      continue;
    }
    return {grpc::StatusCode::PERMISSION_DENIED,
            absl::StrCat("admin: a self-drain credential drains only the "
                         "caller's own address ",
                         host, "; ",
                         address.ok() ? address->ToString() : EchoName(text),
                         " is another")};
  }
  return grpc::Status::OK;
}

}  // namespace aside::server
