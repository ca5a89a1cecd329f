// aside::ClientOptions: how an aside::Client (client/client.h) connects,
// what it subscribes to, and how it picks, reports and logs.
#ifndef ASIDE_CLIENT_CLIENT_OPTIONS_H_
#define ASIDE_CLIENT_CLIENT_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/backoff.h"
#include "client/channel_pool.h"
#include "client/credentials.h"
#include "lib/backend.h"
#include "lib/clock.h"

namespace aside {

struct ClientOptions {
  // Aside servers (replicas), gRPC target syntax ("host:port",
  // "dns:///aside.lb:50051"). Reconnects go round robin over them.
  std::vector<std::string> targets;
  // TLS to the Aside servers.
  TlsOptions tls;
  // Groups subscribed at creation; others are subscribed on first Group().
  std::vector<std::string> groups;
  // Static backends ("ip:port") per group, served round robin until the
  // group's first table arrives.
  std::map<std::string, std::vector<std::string>> fallback;
  // How long Pick waits for a group's first table (counted from the group's
  // subscription) when it has no fallback.
  absl::Duration wait_for_table = absl::Seconds(10);
  // The table cache (client/table_cache.h): the directory where each
  // group's last table from a server is kept, one file per group, so that
  // a service restarting while every Aside server is down can still route.
  // Empty: off. Written after each new generation is applied, on the
  // stub's watcher thread (never on the pick path): atomically, mode 0600,
  // the directory created 0700 when missing. Give each service its own
  // directory; stubs that share one must share their `targets` too.
  //
  // Precedence before a group's first table from a server: the cached
  // table, no older than `cache_max_age`, then the static `fallback` list.
  // A group with a fallback list serves its cached table from the start
  // instead of the list (neither makes picks wait). A group without one
  // waits up to `cache_wait` (at most `wait_for_table`, on `clock`) for a
  // server's table, then serves the cached one: at that pick, or at the
  // first failed connection attempt after it. The first table from a
  // server replaces the cached one at once. A file that is corrupt, of
  // another group or format, written for servers none of which is in
  // `targets`, older than `cache_max_age` or writable by other users is
  // refused with one log line naming it and the reason.
  std::string cache_dir;
  absl::Duration cache_max_age = absl::Hours(24);
  absl::Duration cache_wait = absl::Seconds(1);
  // The clock the stub counts all its time on: call latencies, local
  // ejections, wait_for_table, reconnect backoff and report intervals (null:
  // the system clock). ClientGroup::WaitForGeneration and
  // Client::AwaitStats take real-time bounds instead.
  const Clock* clock = nullptr;
  // Reconnect backoff of the Watch and ReportLoad streams.
  BackoffOptions backoff;
  // Load reports: reporter id (empty: "<hostname>-<pid>"), its locality,
  // and the interval (0 disables reporting).
  std::string reporter;
  Locality locality;
  absl::Duration report_interval = absl::Seconds(1);
  // Bearer token sent with load reports ("authorization: Bearer <token>"),
  // for servers that take reports only from a credential with the `report`
  // role (load_reports.auth: token); empty sends none. With mTLS
  // (tls.cert_file) the certificate's identity may serve instead.
  std::string report_token;
  // Local ejection: after `local_ejection_failures` consecutive failures
  // recorded through PickHandle::Done, this stub stops picking the backend for
  // `local_ejection_time`, without waiting for the server's health checks
  // (a killed backend otherwise keeps failing calls until a probe notices).
  // A failure after that ejects it again at once; a success ends it. When
  // a pick finds only ejected backends it ignores ejections rather than
  // fail. 0 turns it off.
  uint32_t local_ejection_failures = 3;
  absl::Duration local_ejection_time = absl::Seconds(1);
  // The Watch and ReportLoad streams of every Client in the process with
  // the same target and TLS settings share one connection per
  // `streams_per_connection` streams (client/shared_channels.h), so that
  // a server's writes to them coalesce; at most the server's
  // limits.max_concurrent_streams (100 by default). false: each Client
  // opens its own.
  bool share_connections = true;
  size_t streams_per_connection = 100;
  // Channels to backends (Client::channels()).
  ChannelPoolOptions backend_channels;
  // Where the stub logs (rejected tables, connection changes); null means
  // one line per event on stderr.
  std::function<void(absl::string_view)> log;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_CLIENT_OPTIONS_H_
