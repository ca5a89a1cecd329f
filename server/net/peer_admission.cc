#include "server/net/peer_admission.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace aside::server {

std::string PeerKey(const sockaddr* addr, socklen_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return text;
  }
  if (addr->sa_family != AF_INET6 || len < sizeof(sockaddr_in6)) {
    return "";
  }
  in6_addr a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr v4;
    std::memcpy(&v4, &a.s6_addr[12], 4);
    inet_ntop(AF_INET, &v4, text, sizeof(text));
    return text;
  }
  std::memset(&a.s6_addr[8], 0, 8);
  inet_ntop(AF_INET6, &a, text, sizeof(text));
  return absl::StrCat(text, "/64");
}

PeerAdmission::Refusal PeerAdmission::Check(const std::string& peer) const {
  if (max_total_ != 0 && total_ >= max_total_) {
    return Refusal::kTotal;
  }
  if (max_per_peer_ != 0 && !peer.empty() && of(peer) >= max_per_peer_) {
    return Refusal::kPerPeer;
  }
  return Refusal::kNone;
}

void PeerAdmission::Add(const std::string& peer) {
  ++total_;
  if (!peer.empty()) {
    ++per_peer_[peer];
  }
}

void PeerAdmission::Remove(const std::string& peer) {
  if (total_ > 0) {
    --total_;
  }
  if (peer.empty()) {
    return;
  }
  auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second == 0) {
    per_peer_.erase(it);
  }
}

size_t PeerAdmission::of(const std::string& peer) const {
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

}  // namespace aside::server
