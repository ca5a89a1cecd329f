// A real etcd cluster (Debian's etcd-server, 3.4) on loopback for tests:
// N members with free 127.0.0.1 ports, a data directory each (on /dev/shm
// when it exists, which keeps fsync cheap) and their logs in files next to
// the data. It is ready when every running member answers
// Maintenance.Status naming a leader and a linearizable read succeeds; all
// waits are bounded. Members can be killed (SIGKILL), stopped (SIGTERM) and
// started again on the same ports and data. The destructor kills every
// member and removes the directories.
//
// The harness talks to etcd through its own stubs, not through the client
// under test. Not thread-safe: one test thread drives it.
#ifndef ASIDE_TESTS_TESTING_ETCD_CLUSTER_H_
#define ASIDE_TESTS_TESTING_ETCD_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace aside::testing {

class EtcdCluster {
 public:
  struct Options {
    int members = 3;
    // Raft timing (etcd's defaults; smaller values elect faster but make
    // spurious elections likely on a loaded 2-core machine).
    int heartbeat_ms = 100;
    int election_ms = 1000;
    absl::Duration start_timeout = absl::Seconds(30);
    // More flags for every member.
    std::vector<std::string> extra_args;
    // Serve clients over TLS only, requiring a client certificate signed by
    // a test CA made for this cluster (see ca_file() and friends).
    bool tls = false;
  };

  // The etcd binary: $ASIDE_ETCD_BIN, else `etcd` on PATH.
  static absl::StatusOr<std::string> Binary();

  // Starts every member and waits until the cluster serves.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start() {
    return Start(Options{});
  }
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // Client endpoints as host:port, in member order.
  std::vector<std::string> endpoints() const;
  const std::string& endpoint(int i) const { return members_[i].client; }
  // The member whose client endpoint is `endpoint`; -1 if none.
  int IndexOf(const std::string& endpoint) const;
  bool running(int i) const { return members_[i].process != nullptr; }
  // Stopped with Pause and not resumed yet.
  bool paused(int i) const { return members_[i].paused; }

  // SIGKILL, and wait for the process to go.
  void Kill(int i);
  // SIGTERM, a bounded wait, then SIGKILL.
  void Stop(int i);
  // Starts a stopped member again with its data; does not wait.
  absl::Status StartMember(int i);
  // SIGSTOP / SIGCONT: a member that keeps its connections open and
  // answers nothing, like one cut off by a partition. WaitServing, Leader
  // and Etcdctl leave a paused member out.
  void Pause(int i);
  void Resume(int i);
  // StartMember, then WaitServing.
  absl::Status Restart(int i, absl::Duration timeout = absl::Seconds(20));
  // Waits until every running member (but a paused one) answers with a
  // leader and a linearizable read through each succeeds.
  absl::Status WaitServing(absl::Duration timeout);

  // The index of the leader, asking running members (bounded).
  absl::StatusOr<int> Leader(absl::Duration timeout = absl::Seconds(10));

  // The last lines of member i's log, for failure messages.
  std::string LogTail(int i, int lines = 30) const;

  // With Options::tls: PEM files of the test CA and of a client
  // certificate it signed.
  std::string ca_file() const { return root_ + "/ca.crt"; }
  std::string client_cert_file() const { return root_ + "/client.crt"; }
  std::string client_key_file() const { return root_ + "/client.key"; }

  // Runs etcdctl (v3 API) against the running members that are not paused;
  // returns its output or an error with it.
  absl::StatusOr<std::string> Etcdctl(std::vector<std::string> args) const;

 private:
  struct Member {
    std::string name;
    std::string client;  // 127.0.0.1:port
    std::string peer;    // 127.0.0.1:port
    std::string data_dir;
    std::string log_file;
    uint64_t id = 0;  // learnt from Status answers
    std::unique_ptr<Process> process;
    bool paused = false;
  };

  EtcdCluster() = default;
  std::vector<std::string> Argv(int i) const;
  // Status of member i: {member id, leader id}.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> Status(int i,
                                                       absl::Duration timeout);
  absl::Status LinearizableRead(int i, absl::Duration timeout);
  std::shared_ptr<grpc::Channel> ChannelTo(int i) const;
  absl::Status MakeCertificates();
  void Reap();
  // Running and not paused: a member that can answer.
  bool answering(int i) const { return running(i) && !paused(i); }

  Options options_;
  std::string binary_;
  std::string root_;
  std::string token_;
  std::vector<Member> members_;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_ETCD_CLUSTER_H_
