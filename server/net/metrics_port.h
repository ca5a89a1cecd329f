// The metrics port: GET /metrics (the Prometheus text exposition of one
// Metrics registry) and the routes given to it (the status page), on
// Aside's bounded HTTP server (server/net/http_server.h) with its
// connection limits. The server's own HTTP metrics go into the same
// registry.
//
// Thread-safe as HttpServer is: Serve once, StopServing from any thread.
#ifndef ASIDE_SERVER_NET_METRICS_PORT_H_
#define ASIDE_SERVER_NET_METRICS_PORT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/base/metrics.h"
#include "server/net/http_server.h"

namespace aside::server {

class MetricsPort {
 public:
  // `metrics` outlives this.
  explicit MetricsPort(const Metrics& metrics) : metrics_(metrics) {}
  MetricsPort(const MetricsPort&) = delete;
  MetricsPort& operator=(const MetricsPort&) = delete;
  ~MetricsPort() { StopServing(); }

  // Serves on `address` ("host:port", "[v6]:port", port 0 allowed);
  // `options.registry` and `options.warn` are filled in here. Returns the
  // bound port. Once per MetricsPort.
  absl::StatusOr<int> Serve(
      const std::string& address, HttpServerOptions options = {},
      std::vector<std::pair<std::string, HttpHandler>> routes = {});
  // Closes the port and every connection on it, promptly. Idempotent.
  void StopServing();

 private:
  const Metrics& metrics_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_METRICS_PORT_H_
