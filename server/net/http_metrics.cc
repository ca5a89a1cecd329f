// The HTTP server's metrics (http_server.h lists them).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/net/http_server_internal.h"

namespace aside::server::http_internal {

HttpMetrics::HttpMetrics(prometheus::Registry* registry) : registry_(registry) {
  if (registry == nullptr) {
    return;
  }
  accepted_ = &prometheus::BuildCounter()
                   .Name("aside_http_connections_accepted_total")
                   .Help("Connections accepted on the HTTP (metrics) port.")
                   .Register(*registry)
                   .Add({});
  auto& rejected = prometheus::BuildCounter()
                       .Name("aside_http_connections_rejected_total")
                       .Help(
                           "Connections closed at once because a cap was "
                           "reached, by reason.")
                       .Register(*registry);
  for (size_t i = 0; i < kRejectReasonNames.size(); ++i) {
    rejected_[i] = &rejected.Add({{"reason", kRejectReasonNames[i]}});
  }
  auto& closed = prometheus::BuildCounter()
                     .Name("aside_http_connections_closed_total")
                     .Help("Accepted connections closed, by reason.")
                     .Register(*registry);
  for (size_t i = 0; i < kCloseReasons; ++i) {
    closed_[i] = &closed.Add({{"reason", kCloseReasonNames[i]}});
  }
  open_ = &prometheus::BuildGauge()
               .Name("aside_http_connections_open")
               .Help("Connections open on the HTTP (metrics) port.")
               .Register(*registry)
               .Add({});
  accept_errors_ = &prometheus::BuildCounter()
                        .Name("aside_http_accept_errors_total")
                        .Help(
                            "Failed accepts on the HTTP (metrics) port "
                            "(retried after a backoff).")
                        .Register(*registry)
                        .Add({});
  requests_ = &prometheus::BuildCounter()
                   .Name("aside_http_requests_total")
                   .Help(
                       "HTTP requests answered, by route (\"other\" for "
                       "unknown paths) and status code.")
                   .Register(*registry);
}

void HttpMetrics::Accepted() {
  if (registry_ != nullptr) {
    accepted_->Increment();
    open_->Increment();
  }
}
void HttpMetrics::Rejected(RejectReason reason) {
  if (registry_ != nullptr) {
    rejected_[static_cast<size_t>(reason)]->Increment();
  }
}
void HttpMetrics::Closed(CloseReason reason) {
  if (registry_ != nullptr) {
    closed_[static_cast<size_t>(reason)]->Increment();
    open_->Decrement();
  }
}
void HttpMetrics::AcceptError() {
  if (registry_ != nullptr) {
    accept_errors_->Increment();
  }
}
void HttpMetrics::Request(const std::string& route, int code) {
  if (registry_ == nullptr) {
    return;
  }
  prometheus::Counter*& counter = request_cache_[{route, code}];
  if (counter == nullptr) {
    counter = &requests_->Add({{"path", route}, {"code", absl::StrCat(code)}});
  }
  counter->Increment();
}

}  // namespace aside::server::http_internal
