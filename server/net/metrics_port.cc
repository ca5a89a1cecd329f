#include "server/net/metrics_port.h"

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace aside::server {

absl::StatusOr<int> MetricsPort::Serve(
    const std::string& address, HttpServerOptions options,
    std::vector<std::pair<std::string, HttpHandler>> routes) {
  if (http_ != nullptr) {
    return absl::FailedPreconditionError("metrics: already serving");
  }
  options.registry = metrics_.registry().get();
  options.warn = [](absl::string_view event, absl::string_view detail) {
    Log(LogLevel::kWarn, event, {{"detail", std::string(detail)}});
  };
  auto http = std::make_unique<HttpServer>(std::move(options));
  http->Route("/metrics", [this](const HttpRequest&) {
    return HttpResponse{
        .status = 200,
        .content_type = "text/plain; version=0.0.4; charset=utf-8",
        .body = metrics_.Render()};
  });
  for (auto& [path, handler] : routes) {
    http->Route(std::move(path), std::move(handler));
  }
  absl::StatusOr<int> port = http->Start(address);
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", address, ": ", port.status().message()));
  }
  http_ = std::move(http);
  return *port;
}

void MetricsPort::StopServing() {
  if (http_ != nullptr) {
    http_->Stop();
  }
}

}  // namespace aside::server
