#include "server/auth/report_auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/base/client_peer.h"

namespace aside::server {

grpc::Status ReportAuth::Authorize(const grpc::ServerContextBase& context,
                                   Reporter* out) const {
  if (auth_ != nullptr) {
    const AdminAuth::Caller caller =
        auth_->Identify(context, AdminRole::kReport);
    if (!caller.name.empty()) {
      out->name = caller.name;
      out->source = caller.name;
      return grpc::Status::OK;
    }
  }
  if (open_) {
    out->name = "anonymous";
    out->source =
        absl::StrCat("anonymous@", PeerHost(ClientPeer(context.peer())));
    return grpc::Status::OK;
  }
  if (!trusted_networks_.empty()) {
    const std::string host = PeerHost(ClientPeer(context.peer()));
    if (InNetworks(trusted_networks_, host)) {
      out->name = "trusted_network";
      out->source = absl::StrCat("trusted@", host);
      return grpc::Status::OK;
    }
  }
  if (auth_ == nullptr) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "load reports: no credentials are configured on this server; "
            "reports are refused (or set load_reports.auth: open on a "
            "trusted network)"};
  }
  return auth_->Authorize(context, AdminRole::kReport);
}

bool ReportAuth::usable() const {
  return open_ || !trusted_networks_.empty() ||
         (auth_ != nullptr && auth_->configured());
}

absl::string_view ReportAuth::RefusalReason(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::PERMISSION_DENIED
             ? "permission_denied"
             : "unauthenticated";
}

std::string ReportAuth::PeerHost(absl::string_view peer) {
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    peer.remove_prefix(5);
    if (!peer.empty() && peer.front() == '[') {
      const size_t close = peer.find(']');
      return std::string(peer.substr(
          1, close == absl::string_view::npos ? peer.size() - 1 : close - 1));
    }
    return std::string(peer.substr(0, peer.rfind(':')));
  }
  // unix sockets and the rest: one source for all of them.
  return std::string(peer.substr(0, peer.find(':')));
}

}  // namespace aside::server
