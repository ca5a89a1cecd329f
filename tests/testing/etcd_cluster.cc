#include "tests/testing/etcd_cluster.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace aside::testing {

namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

std::string MakeRoot() {
  std::error_code ec;
  std::string base = "/dev/shm";
  if (!std::filesystem::is_directory(base, ec) ||
      access(base.c_str(), W_OK) != 0) {
    base = std::filesystem::temp_directory_path().string();
  }
  std::string tmpl = base + "/aside-etcd-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return "";
  }
  return tmpl;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

std::shared_ptr<grpc::Channel> EtcdCluster::ChannelTo(int i) const {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (options_.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadAll(ca_file());
    ssl.pem_cert_chain = ReadAll(client_cert_file());
    ssl.pem_private_key = ReadAll(client_key_file());
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(members_[i].client, credentials, args);
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, with
// openssl, valid for a day.
absl::Status EtcdCluster::MakeCertificates() {
  const std::string ext = root_ + "/server.ext";
  std::ofstream(ext) << "subjectAltName=IP:127.0.0.1\n";
  auto key = [&](const std::string& name) {
    return std::vector<std::string>{"-newkey",
                                    "ec",
                                    "-pkeyopt",
                                    "ec_paramgen_curve:prime256v1",
                                    "-nodes",
                                    "-keyout",
                                    root_ + "/" + name + ".key"};
  };
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> ca = {
      "openssl",           "req",  "-x509",          "-days", "1", "-subj",
      "/CN=aside-test-ca", "-out", root_ + "/ca.crt"};
  for (const std::string& a : key("ca")) ca.push_back(a);
  commands.push_back(ca);
  for (const std::string name : {"server", "client"}) {
    std::vector<std::string> req = {
        "openssl", "req",
        "-subj",   name == "server" ? "/CN=127.0.0.1" : "/CN=root",
        "-out",    root_ + "/" + name + ".csr"};
    for (const std::string& a : key(name)) req.push_back(a);
    commands.push_back(req);
    std::vector<std::string> sign = {"openssl",
                                     "x509",
                                     "-req",
                                     "-days",
                                     "1",
                                     "-in",
                                     root_ + "/" + name + ".csr",
                                     "-CA",
                                     root_ + "/ca.crt",
                                     "-CAkey",
                                     root_ + "/ca.key",
                                     "-CAcreateserial",
                                     "-out",
                                     root_ + "/" + name + ".crt"};
    if (name == "server") {
      sign.push_back("-extfile");
      sign.push_back(ext);
    }
    commands.push_back(sign);
  }
  for (std::vector<std::string>& command : commands) {
    CommandResult r = RunCommand(command, absl::Seconds(20));
    if (r.exit_code != 0) {
      return absl::InternalError(absl::StrCat(absl::StrJoin(command, " "),
                                              " exited ", r.exit_code, ": ",
                                              r.output));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EtcdCluster::Binary() {
  if (const char* env = std::getenv("ASIDE_ETCD_BIN"); env != nullptr) {
    return std::string(env);
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/etcd");
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return absl::FailedPreconditionError(
      "etcd not found on PATH (install etcd-server: scripts/install-deps.sh)");
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    Options options) {
  absl::StatusOr<std::string> binary = Binary();
  if (!binary.ok()) {
    return binary.status();
  }
  auto cluster = std::unique_ptr<EtcdCluster>(new EtcdCluster());
  cluster->options_ = options;
  cluster->binary_ = *binary;
  cluster->root_ = MakeRoot();
  if (cluster->root_.empty()) {
    return absl::InternalError("cannot create a directory for etcd's data");
  }
  cluster->token_ = absl::StrCat("aside-test-", getpid(), "-",
                                 absl::ToUnixNanos(absl::Now()));
  if (options.tls) {
    if (absl::Status s = cluster->MakeCertificates(); !s.ok()) {
      return s;
    }
  }
  std::set<int> ports;
  while (ports.size() < static_cast<size_t>(2 * options.members)) {
    ports.insert(PickUnusedPort());
  }
  auto port = ports.begin();
  for (int i = 0; i < options.members; ++i) {
    Member m;
    m.name = absl::StrCat("m", i);
    m.client = absl::StrCat("127.0.0.1:", *port++);
    m.peer = absl::StrCat("127.0.0.1:", *port++);
    m.data_dir = absl::StrCat(cluster->root_, "/", m.name, ".etcd");
    m.log_file = absl::StrCat(cluster->root_, "/", m.name, ".log");
    cluster->members_.push_back(std::move(m));
  }
  for (int i = 0; i < options.members; ++i) {
    if (absl::Status s = cluster->StartMember(i); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = cluster->WaitServing(options.start_timeout); !s.ok()) {
    return s;
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) {
    m.process.reset();  // SIGKILL and wait
  }
  std::error_code ec;
  if (!root_.empty()) {
    std::filesystem::remove_all(root_, ec);
  }
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const Member& m : members_) {
    out.push_back(m.client);
  }
  return out;
}

int EtcdCluster::IndexOf(const std::string& endpoint) const {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].client == endpoint) {
      return i;
    }
  }
  return -1;
}

std::vector<std::string> EtcdCluster::Argv(int i) const {
  const Member& m = members_[i];
  std::vector<std::string> initial;
  for (const Member& other : members_) {
    initial.push_back(absl::StrCat(other.name, "=http://", other.peer));
  }
  const std::string scheme = options_.tls ? "https://" : "http://";
  std::vector<std::string> argv = {binary_,
                                   "--name",
                                   m.name,
                                   "--data-dir",
                                   m.data_dir,
                                   "--listen-client-urls",
                                   absl::StrCat(scheme, m.client),
                                   "--advertise-client-urls",
                                   absl::StrCat(scheme, m.client),
                                   "--listen-peer-urls",
                                   absl::StrCat("http://", m.peer),
                                   "--initial-advertise-peer-urls",
                                   absl::StrCat("http://", m.peer),
                                   "--initial-cluster",
                                   absl::StrJoin(initial, ","),
                                   "--initial-cluster-state",
                                   "new",
                                   "--initial-cluster-token",
                                   token_,
                                   "--heartbeat-interval",
                                   absl::StrCat(options_.heartbeat_ms),
                                   "--election-timeout",
                                   absl::StrCat(options_.election_ms),
                                   "--logger",
                                   "zap",
                                   "--log-outputs",
                                   m.log_file};
  if (options_.tls) {
    argv.insert(argv.end(), {"--cert-file", root_ + "/server.crt", "--key-file",
                             root_ + "/server.key", "--trusted-ca-file",
                             ca_file(), "--client-cert-auth"});
  }
  argv.insert(argv.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  return argv;
}

absl::Status EtcdCluster::StartMember(int i) {
  Member& m = members_[i];
  if (m.process != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd member ", m.name, " is already running"));
  }
  absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(Argv(i));
  if (!p.ok()) {
    return p.status();
  }
  m.process = *std::move(p);
  m.paused = false;
  return absl::OkStatus();
}

void EtcdCluster::Kill(int i) {
  Member& m = members_[i];
  if (m.process != nullptr) {
    m.process->Signal(SIGKILL);
    m.process->Wait(absl::Seconds(10));
    m.process.reset();
  }
  m.paused = false;
}

void EtcdCluster::Stop(int i) {
  Member& m = members_[i];
  if (m.process != nullptr) {
    m.process->Signal(SIGTERM);
    if (m.paused) {
      m.process->Signal(SIGCONT);  // to act on the SIGTERM
    }
    if (!m.process->Wait(absl::Seconds(10)).has_value()) {
      m.process->Signal(SIGKILL);
      m.process->Wait(absl::Seconds(10));
    }
    m.process.reset();
  }
  m.paused = false;
}

void EtcdCluster::Pause(int i) {
  if (members_[i].process != nullptr) {
    members_[i].process->Signal(SIGSTOP);
    members_[i].paused = true;
  }
}

void EtcdCluster::Resume(int i) {
  if (members_[i].process != nullptr) {
    members_[i].process->Signal(SIGCONT);
  }
  members_[i].paused = false;
}

absl::Status EtcdCluster::Restart(int i, absl::Duration timeout) {
  if (absl::Status s = StartMember(i); !s.ok()) {
    return s;
  }
  return WaitServing(timeout);
}

void EtcdCluster::Reap() {
  for (Member& m : members_) {
    if (m.process != nullptr &&
        m.process->Wait(absl::ZeroDuration()).has_value()) {
      m.process.reset();
    }
  }
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> EtcdCluster::Status(
    int i, absl::Duration timeout) {
  auto stub = etcdserverpb::Maintenance::NewStub(ChannelTo(i));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  etcdserverpb::StatusResponse response;
  const grpc::Status status =
      stub->Status(&context, etcdserverpb::StatusRequest(), &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat(members_[i].name, " (", members_[i].client,
                     "): Status: ", status.error_message()));
  }
  members_[i].id = response.header().member_id();
  return std::make_pair(response.header().member_id(), response.leader());
}

absl::Status EtcdCluster::LinearizableRead(int i, absl::Duration timeout) {
  auto stub = etcdserverpb::KV::NewStub(ChannelTo(i));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  etcdserverpb::RangeRequest request;
  request.set_key("aside-test-probe");
  etcdserverpb::RangeResponse response;
  const grpc::Status status = stub->Range(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat(members_[i].name, " (", members_[i].client,
                     "): Range: ", status.error_message()));
  }
  return absl::OkStatus();
}

absl::Status EtcdCluster::WaitServing(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::OkStatus();
  while (true) {
    Reap();
    last = absl::OkStatus();
    for (int i = 0; i < size() && last.ok(); ++i) {
      if (!answering(i)) {
        continue;
      }
      absl::StatusOr<std::pair<uint64_t, uint64_t>> status =
          Status(i, absl::Seconds(1));
      if (!status.ok()) {
        last = status.status();
      } else if (status->second == 0) {
        last = absl::UnavailableError(
            absl::StrCat(members_[i].name, " knows no leader"));
      } else {
        last = LinearizableRead(i, absl::Seconds(2));
      }
    }
    if (last.ok()) {
      return last;
    }
    if (absl::Now() >= deadline) {
      std::string logs;
      for (int i = 0; i < size(); ++i) {
        absl::StrAppend(&logs, "\n--- ", members_[i].name,
                        running(i) ? "" : " (not running)", " log:\n",
                        LogTail(i, 10));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "etcd cluster not serving within ", absl::FormatDuration(timeout),
          ": ", last.message(), logs));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::StatusOr<int> EtcdCluster::Leader(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no member running";
  while (true) {
    Reap();
    // Member ids, then the leader that a running member names.
    uint64_t leader = 0;
    for (int i = 0; i < size(); ++i) {
      if (!answering(i)) {
        continue;
      }
      absl::StatusOr<std::pair<uint64_t, uint64_t>> status =
          Status(i, absl::Seconds(1));
      if (!status.ok()) {
        last = std::string(status.status().message());
      } else if (status->second != 0) {
        leader = status->second;
      }
    }
    for (int i = 0; i < size() && leader != 0; ++i) {
      if (answering(i) && members_[i].id == leader) {
        return i;
      }
    }
    if (leader != 0) {
      last = absl::StrCat("leader ", leader, " is not a running member");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no etcd leader within ", absl::FormatDuration(timeout), ": ", last));
    }
    absl::SleepFor(kPollInterval);
  }
}

std::string EtcdCluster::LogTail(int i, int lines) const {
  std::ifstream in(members_[i].log_file);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) {
    all.push_back(line);
  }
  const size_t from =
      all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<std::ptrdiff_t>(from),
                       all.end(), "\n");
}

absl::StatusOr<std::string> EtcdCluster::Etcdctl(
    std::vector<std::string> args) const {
  std::vector<std::string> running_endpoints;
  for (const Member& m : members_) {
    if (m.process != nullptr && !m.paused) {
      running_endpoints.push_back(
          absl::StrCat(options_.tls ? "https://" : "http://", m.client));
    }
  }
  std::vector<std::string> argv = {
      "etcdctl",
      absl::StrCat("--endpoints=", absl::StrJoin(running_endpoints, ",")),
      "--command-timeout=5s"};
  if (options_.tls) {
    argv.insert(argv.end(),
                {"--cacert=" + ca_file(), "--cert=" + client_cert_file(),
                 "--key=" + client_key_file()});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult result = RunCommand(argv, absl::Seconds(10));
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("etcdctl ", absl::StrJoin(args, " "), " exited ",
                     result.exit_code, ": ", result.output));
  }
  return result.output;
}

}  // namespace aside::testing
