// Plain blocking sockets for the HTTP server tests: connections from a
// chosen loopback source address, raw bytes, and reads bounded by a
// deadline (poll), so a test can hold hundreds of half-open requests and
// see exactly when the server closes them.
#ifndef ASIDE_TESTS_HTTP_RAW_CLIENT_H_
#define ASIDE_TESTS_HTTP_RAW_CLIENT_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::testing {

// An owned socket (closed on destruction).
class RawConnection {
 public:
  RawConnection() = default;
  explicit RawConnection(int fd) : fd_(fd) {}
  RawConnection(RawConnection&& other) noexcept
      : fd_(other.release()), pending_(std::move(other.pending_)) {}
  RawConnection& operator=(RawConnection&& other) noexcept;
  ~RawConnection() { Close(); }

  // Connects to `host`:`port` from `source` (an IP, port chosen by the
  // kernel; empty lets the kernel choose the address too).
  static absl::StatusOr<RawConnection> Connect(const std::string& host,
                                               int port,
                                               const std::string& source = "");

  int fd() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Close();

  // Writes all of `data` (MSG_NOSIGNAL: a closed peer is an error, not a
  // signal).
  absl::Status Send(absl::string_view data);
  // Reads until the peer closes (EOF or reset) and returns what arrived;
  // DeadlineExceeded if it is still open after `timeout`.
  absl::StatusOr<std::string> ReadUntilClosed(absl::Duration timeout);
  // True while the peer has not closed: no EOF or reset is pending (data
  // waiting to be read does not count as closed).
  bool PeerOpen();

  // Bytes read past the end of the last response (pipelining).
  std::string& pending() { return pending_; }

 private:
  int fd_ = -1;
  std::string pending_;
};

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower case
  std::string body;
};

// Reads one response (headers, then Content-Length bytes of body unless
// `head`) within `timeout`.
absl::StatusOr<RawResponse> ReadResponse(RawConnection& conn,
                                         absl::Duration timeout,
                                         bool head = false);

// One request on a new connection from `source` ("Connection: close").
absl::StatusOr<RawResponse> RawGet(const std::string& host, int port,
                                   const std::string& target,
                                   const std::string& source = "",
                                   absl::Duration timeout = absl::Seconds(10));

// Sends one byte every `interval` on each of its connections: a request
// line and then an endless header, so no request ever completes. Send
// errors are expected once the server has closed a connection.
class Trickler {
 public:
  Trickler(std::vector<RawConnection*> conns, absl::Duration interval)
      : conns_(std::move(conns)),
        thread_([this, interval] { Run(interval); }) {}
  ~Trickler() { Stop(); }
  void Stop();
  int sent() const { return sent_.load(); }

 private:
  void Run(absl::Duration interval);

  std::vector<RawConnection*> conns_;
  aside::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> sent_{0};
  std::thread thread_;
};

// Open file descriptors of this process (entries of /proc/self/fd).
int CountOpenFds();

// Calls `done` until it returns true or `timeout` passes (every 5 ms);
// returns its last result. For conditions with no event to wait on (a
// count in another thread, the fd table).
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout);

}  // namespace aside::testing

#endif  // ASIDE_TESTS_HTTP_RAW_CLIENT_H_
