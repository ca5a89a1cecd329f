#include "server/admin_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", role, "' (allowed: admin, read)"));
}

absl::string_view RoleName(AdminRole role) {
  switch (role) {
    case AdminRole::kAdmin:
      return "admin";
    case AdminRole::kRead:
      return "read";
    default:
      return "none";
  }
}

}  // namespace

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
      if (parts.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            token_file, ":", line_number, ": expected 'TOKEN ROLE'"));
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
      auth->tokens_.push_back({digest, *role});
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

AdminRole AdminAuth::RoleOfToken(absl::string_view token) const {
  const auto digest = Digest(token);
  AdminRole found = AdminRole::kNone;
  // Compare against every token, whatever matches, so timing does not say
  // which (or whether one) matched.
  for (const Token& t : tokens_) {
    const bool equal =
        CRYPTO_memcmp(digest.data(), t.digest.data(), digest.size()) == 0;
    if (equal && t.role > found) {
      found = t.role;
    }
  }
  return found;
}

grpc::Status AdminAuth::Authorize(const grpc::ServerContextBase& context,
                                  AdminRole needed) const {
  AdminRole role = AdminRole::kNone;
  bool presented = false;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    presented = true;
    absl::string_view value(it->second.data(), it->second.size());
    if (absl::StartsWithIgnoreCase(value, "bearer ")) {
      role = RoleOfToken(absl::StripAsciiWhitespace(value.substr(7)));
    }
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property :
         {"x509_subject_alternative_name", "peer_uri", "peer_dns",
          "peer_spiffe_id", "x509_common_name"}) {
      for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
        presented = true;
        absl::string_view v(value.data(), value.size());
        for (const auto& [identity, id_role] : identities_) {
          if (identity == v && id_role > role) {
            role = id_role;
          }
        }
      }
    }
  }
  if (role >= needed) {
    return grpc::Status::OK;
  }
  if (!configured()) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "admin: no credentials are configured on this server "
            "(admin.token_file or admin.allowed_identities); Admin calls are "
            "refused"};
  }
  if (!presented || role == AdminRole::kNone) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "admin: missing or unknown credentials (send 'authorization: "
            "Bearer <token>' metadata)"};
  }
  return {grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("admin: role '", RoleName(role), "' may not do this ('",
                       RoleName(needed), "' required)")};
}

}  // namespace aside::server
