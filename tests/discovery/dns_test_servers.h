// DNS servers for the discovery tests, all on loopback: a real dnsmasq
// (Debian's dnsmasq-base) started as a child process, and a scripted UDP
// server for answers dnsmasq will not give on demand (SERVFAIL, REFUSED,
// silence, answers held until the test releases them).
#ifndef ASIDE_TESTS_DISCOVERY_DNS_TEST_SERVERS_H_
#define ASIDE_TESTS_DISCOVERY_DNS_TEST_SERVERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "tests/testing/process.h"

namespace aside::testing {

// dnsmasq answering for the zone "test" only (--local=/test/: names it does
// not know are NXDOMAIN, nothing is forwarded), from an addn-hosts file the
// test rewrites and from command-line records (--srv-host=..., fixed until a
// restart). Not thread-safe: drive it from the test thread.
class Dnsmasq {
 public:
  struct Options {
    // "127.0.0.1" or "::1".
    std::string listen_address = "127.0.0.1";
    // Lines of the hosts file: "10.0.0.1 web.test".
    std::string hosts;
    // More dnsmasq flags, e.g. "--srv-host=_http._tcp.web.test,a.test,80".
    std::vector<std::string> args;
  };

  // Starts dnsmasq on a free port and waits until it serves.
  static absl::StatusOr<std::unique_ptr<Dnsmasq>> Start(Options options);
  ~Dnsmasq();

  // Rewrites the hosts file and waits until dnsmasq has re-read it (SIGHUP).
  absl::Status SetHosts(const std::string& hosts);
  // Stops dnsmasq (the port then refuses queries).
  absl::Status Stop();
  // Starts it again on the same port, with `args` replacing Options::args
  // (SRV records are only read at start).
  absl::Status Restart(std::vector<std::string> args);

  int port() const { return port_; }
  // The server as DnsDiscoveryOptions::servers wants it.
  std::string server() const;

 private:
  Dnsmasq() = default;
  absl::Status Launch();

  Options options_;
  TempDir dir_;
  std::string hosts_path_;
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

// A scripted DNS server on 127.0.0.1 (UDP only). Each query goes to
// `handler`, which decides the answer. Thread-safe; its thread answers.
class FakeDnsServer {
 public:
  struct Answer {
    enum class Kind { kReply, kDrop, kHold };
    Kind kind = Kind::kReply;
    // RCODE: 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED.
    int rcode = 0;
    // For kReply with rcode 0: A / AAAA records of the question's type
    // ("10.0.0.1", "fd00::1"); empty is NODATA.
    std::vector<std::string> addresses;
    // For kReply with rcode 0 to an SRV question: its records (priority
    // and weight 0), e.g. {"lb.lb.test", 50051}; empty is NODATA.
    struct Srv {
      std::string target;
      int port = 0;
    };
    std::vector<Srv> srv;
  };
  // qtype: 1 A, 28 AAAA, 33 SRV.
  using Handler = std::function<Answer(const std::string& name, int qtype)>;

  static absl::StatusOr<std::unique_ptr<FakeDnsServer>> Start(Handler handler);
  ~FakeDnsServer();

  int port() const { return port_; }
  std::string server() const;

  // Queries received so far (all kinds).
  int queries() const;
  // Waits until at least `count` queries are held (Answer::Kind::kHold).
  absl::Status WaitForHeld(int count, absl::Duration timeout);
  // Answers every held query with `answer` (kReply only).
  void ReleaseHeld(const Answer& answer);

 private:
  struct Held {
    std::vector<uint8_t> query;
    std::vector<uint8_t> peer;  // sockaddr bytes
    std::string name;
    int qtype = 0;
  };
  FakeDnsServer() = default;
  void Run();
  void Send(const std::vector<uint8_t>& query, const std::vector<uint8_t>& peer,
            int qtype, const Answer& answer);

  Handler handler_;
  int fd_ = -1;
  int stop_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  mutable Mutex mu_;
  int queries_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_DISCOVERY_DNS_TEST_SERVERS_H_
