// A small HTTP/1.1 server for read-only endpoints (/metrics today; a status
// page and its JSON later), on Boost.Beast and one io_context on its own
// thread. It is built to share a port with untrusted peers: no connection,
// however slow or silent, holds resources for long, and no single peer can
// take all of them.
//
// - Routes: exact paths, registered before Start(). GET and HEAD reach the
//   handler (HEAD gets the GET headers and no body); other methods get 405
//   with `Allow: GET, HEAD`; an unknown path gets 404. Requests with a body
//   (Content-Length > 0 or chunked) get 413 and the connection is closed.
// - Keep-alive (HTTP/1.1 default; HTTP/1.0 with `Connection: keep-alive`),
//   one request at a time; pipelined requests are read in order.
// - Bounds (HttpServerOptions): a new connection must deliver a request's
//   complete headers within `header_timeout` of being accepted; after a
//   response, the next request must start within `idle_timeout` and its
//   headers must be complete within `header_timeout` of its first byte;
//   a response must be written within `write_timeout`. Headers above
//   `max_header_bytes` get 431, malformed ones 400, and the connection is
//   closed. At most `max_connections` connections in total and
//   `max_connections_per_peer` per peer (server/net/peer_admission.h: an
//   IPv4 address, an IPv6 /64; 0 is no cap). At the total cap, the oldest
//   connection that has not yet delivered a complete request is closed to
//   make room (closed reason "evicted"), so peers holding partial requests
//   cannot keep out a client that sends whole ones; with none such, and
//   beyond the per-peer cap, a new connection is answered with a
//   best-effort 503 and closed at once, without reading from it.
// - The acceptor never stops: accept errors (EMFILE, ENFILE, ENOBUFS, ...)
//   are logged and counted, and accepting resumes after a backoff (10 ms
//   doubling to 1 s while the errors last).
//
// Metrics (when options.registry is set; families are merged with existing
// ones of the same name):
//   aside_http_connections_accepted_total           counter
//   aside_http_connections_rejected_total{reason}   counter  total_limit,
//       peer_limit
//   aside_http_connections_closed_total{reason}     counter  peer_closed,
//       header_timeout, idle_timeout, write_timeout, bad_request,
//       not_keep_alive, shutdown, error, evicted
//   aside_http_connections_open                     gauge
//   aside_http_accept_errors_total                  counter
//   aside_http_requests_total{path,code}            counter  path is a
//       registered route or "other"
//
// Thread-safety: Route() before Start(); Start() and Stop() from any thread
// but the server's own (handlers must not call Stop()); open_connections()
// from any thread. Handlers run on the server thread, one at a time, so a
// handler should be quick (it delays every other connection while it runs).
// Cost per connection: one socket, one timer and a read buffer of at most
// max_header_bytes + 4 KiB.
#ifndef ASIDE_SERVER_NET_HTTP_SERVER_H_
#define ASIDE_SERVER_NET_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace aside::server {

struct HttpServerOptions {
  // A new connection's first request headers must be complete this long
  // after accept; a later request's headers this long after its first byte.
  absl::Duration header_timeout = absl::Seconds(5);
  // Longest wait for the next request on a kept-alive connection. Longer
  // than the common 15 s and 30 s scrape intervals, so those reuse their
  // connection, and clear of the 60 s default.
  absl::Duration idle_timeout = absl::Seconds(45);
  // Longest time to write one response (a peer that stops reading).
  absl::Duration write_timeout = absl::Seconds(10);
  // Largest request line plus headers.
  uint32_t max_header_bytes = 8 * 1024;
  // Connections served at once, in total and per peer IP address.
  uint32_t max_connections = 512;
  uint32_t max_connections_per_peer = 32;
  // Where the server's own metrics go; none when null. Must outlive the
  // server.
  prometheus::Registry* registry = nullptr;
  // Receives warnings (event name, detail): accept errors and rejected
  // connections, each kind at most once per 10 s with a count of those
  // left out. Called on the server thread; none when empty.
  std::function<void(absl::string_view event, absl::string_view detail)> warn;
};

// What a handler sees. Views are valid during the handler call only.
struct HttpRequest {
  absl::string_view method;  // "GET" or "HEAD"
  absl::string_view target;  // as sent: path and query
  absl::string_view path;    // target up to '?'
  absl::string_view query;   // after '?', empty if none
  std::vector<std::pair<absl::string_view, absl::string_view>> headers;

  // The first value of header `name` (case-insensitive); empty if absent.
  absl::string_view Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;  // 200..599; anything else is sent as 500
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra headers (Content-Type, Content-Length and Connection are set by
  // the server).
  std::vector<std::pair<std::string, std::string>> headers;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();  // Stop()

  // Serves `handler` for GET and HEAD of exactly `path` ("/metrics").
  // Before Start() only.
  void Route(std::string path, HttpHandler handler);

  // Binds `address` ("host:port", "[v6]:port", port 0 for any free port; a
  // host name is resolved and its first address bound), starts the server
  // thread and returns the bound port. Once per server.
  absl::StatusOr<int> Start(absl::string_view address);

  // Closes the listener and every connection (responses being written are
  // cut off) and joins the thread. Prompt: nothing waits for a peer.
  // Idempotent.
  void Stop();

  // Connections open now (accepted and not yet closed).
  size_t open_connections() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_NET_HTTP_SERVER_H_
