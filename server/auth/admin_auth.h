// Who may call aside.v1.Admin and who may report load: bearer tokens from a
// token file and mTLS client identities, each with a role. Admin roles are
// ordered (read < admin); `report` stands apart: it may send load reports
// (ReportLoad, grpclb ClientStats, xDS LRS) and nothing else, and of the
// Admin roles only `admin` may also report. `self-drain` stands apart too:
// it is the credential a backend holds (a Kubernetes preStop hook) and may
// call DrainBackends, to drain or undrain, for addresses at the caller's own
// IP and nothing else (AuthorizeDrain). Each credential has a name
// (the token line's optional third column, else "token:<line>"; an
// identity is its own name), which names the reporter in metrics and
// bounds its influence on the load aggregate (server/auth/report_auth.h).
//
// Tokens are kept only as SHA-256 digests and compared in constant time
// (every configured token is compared on every call); they are never logged.
// With nothing configured every Admin call is refused.
#ifndef ASIDE_SERVER_AUTH_ADMIN_AUTH_H_
#define ASIDE_SERVER_AUTH_ADMIN_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/config/config.h"

namespace aside::server {

enum class AdminRole {
  kNone = 0,
  kRead = 1,
  kAdmin = 2,
  kReport = 3,
  kSelfDrain = 4,
};

// Whether a credential holding `have` may do what `needed` allows.
bool RoleGrants(AdminRole have, AdminRole needed);

class AdminAuth {
 public:
  // Reads the token file (errors name file:line); identities come from the
  // config.
  static absl::StatusOr<std::unique_ptr<AdminAuth>> Create(
      const std::string& token_file,
      const std::vector<ServerConfig::AdminIdentity>& identities);

  // OK when the caller holds at least `needed`; otherwise UNAUTHENTICATED
  // (no or unknown credentials) or PERMISSION_DENIED (role too low).
  grpc::Status Authorize(const grpc::ServerContextBase& context,
                         AdminRole needed) const;

  // DrainBackends: OK for an `admin` credential, and for a `self-drain` one
  // when every one of `addresses` is an IP address equal to the caller's
  // (the peer of the call, after the connection relay: any port, IPv4 seen
  // as v4-mapped IPv6 matched as IPv4); otherwise what Authorize says, or
  // PERMISSION_DENIED naming the first address that is not the caller's.
  // The peer IP is the only check: mTLS identities name no address here.
  grpc::Status AuthorizeDrain(const grpc::ServerContextBase& context,
                              const std::vector<std::string>& addresses) const;

  // The role of a bearer token ("Bearer xyz" header value), kNone if unknown.
  AdminRole RoleOfToken(absl::string_view token) const;

  // The caller's credentials: whether any were presented, and the name of
  // the first one (token, then identity) that grants `needed` ("" when
  // none does).
  struct Caller {
    bool presented = false;
    std::vector<AdminRole> roles;  // of every credential recognised
    std::string name;
  };
  Caller Identify(const grpc::ServerContextBase& context,
                  AdminRole needed) const;

  bool configured() const { return !tokens_.empty() || !identities_.empty(); }

 private:
  struct Token {
    std::array<unsigned char, 32> digest;
    AdminRole role;
    std::string name;
  };
  // The token matching `token`, or null (every token is compared).
  const Token* FindToken(absl::string_view token) const;
  AdminAuth() = default;

  std::vector<Token> tokens_;
  std::vector<std::pair<std::string, AdminRole>> identities_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_AUTH_ADMIN_AUTH_H_
