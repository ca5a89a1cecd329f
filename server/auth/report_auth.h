// Who may send load reports (aside.v1 ReportLoad, grpclb ClientStats, xDS
// LRS), and as whom their reports count.
//
// Two modes (config `load_reports.auth`):
// - token (the default): a credential with the `report` or `admin` role is
//   required (a bearer token from the admin token file, or an mTLS
//   identity; server/auth/admin_auth.h); without one UNAUTHENTICATED, with
//   another role PERMISSION_DENIED.
// - open: anyone who reaches the port may report. For trusted networks,
//   chosen knowingly. Callers that do present a valid report credential
//   still count under its name.
// In token mode, `trusted_networks` (load_reports.trusted_networks) lets
// callers without a credential report when their address is in one of
// them: for stock clients that cannot carry one (grpc-js's LRS has neither
// TLS nor call credentials towards its management server). They count as
// "trusted_network", each host a source of its own.
//
// A reporter has a `name` (a bounded metric label: the credential's name,
// or "anonymous") and a `source`, the unit whose influence on the load
// aggregate is bounded (LoadAggregator): the credential's name, or in open
// mode without credentials "anonymous@<peer host>", so one host counts once
// however many reporter ids it invents.
//
// Thread-safe (immutable after construction).
#ifndef ASIDE_SERVER_AUTH_REPORT_AUTH_H_
#define ASIDE_SERVER_AUTH_REPORT_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "lib/ip_network.h"
#include "server/auth/admin_auth.h"

namespace aside::server {

class ReportAuth {
 public:
  struct Reporter {
    std::string name;
    std::string source;
  };

  // `auth` (may be null: no credentials) must outlive this.
  ReportAuth(bool open, const AdminAuth* auth,
             std::vector<IpNetwork> trusted_networks = {})
      : open_(open),
        auth_(auth),
        trusted_networks_(std::move(trusted_networks)) {}

  // OK and fills `out`, or UNAUTHENTICATED / PERMISSION_DENIED.
  grpc::Status Authorize(const grpc::ServerContextBase& context,
                         Reporter* out) const;

  bool open() const { return open_; }
  // Whether any report credential could be accepted (open mode, or
  // credentials configured).
  bool usable() const;

  // The metric reason of a refusal ("unauthenticated", "permission_denied").
  static absl::string_view RefusalReason(const grpc::Status& status);

  // The host part of a gRPC peer string ("ipv4:10.0.0.1:5000" ->
  // "10.0.0.1", "ipv6:[::1]:5000" -> "::1").
  static std::string PeerHost(absl::string_view peer);

 private:
  const bool open_;
  const AdminAuth* const auth_;
  const std::vector<IpNetwork> trusted_networks_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_AUTH_REPORT_AUTH_H_
