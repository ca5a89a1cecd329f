// fanout_floor: the floor for Aside's Watch fan-out, a bare gRPC server of
// the same shape as server/api/watch.cc with nothing of Aside in it.
//
// It serves aside.v1.LoadBalancer/Watch as a raw callback method: one
// ServerWriteReactor per stream, at most one write in flight, only the
// newest update queued. An update is one pre-serialised GroupUpdate of
// --update-bytes bytes (the size Aside's delta had in the same run), encoded
// once per group and shared by every stream of it, as Aside does; a stream
// follows the first group its request names. The three Admin methods
// fanout_load and fanout_churn call are stubs: CreateGroup and DeleteGroup
// succeed, DrainBackends publishes the group's next generation to its
// streams and replies with it. So the tools measure both servers
// unchanged.
//
//   fanout_floor --listen 127.0.0.1:0 --update-bytes 120
//
// Prints "port=N" on stdout once it listens; runs until SIGTERM/SIGINT.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/command_line.h"
#include "lib/sync.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "address to listen on");
ABSL_FLAG(int, update_bytes, 120, "serialised size of one update");
ABSL_FLAG(bool, deadlock_detection, false,
          "leave abseil's lock-order checking as the library has it");

namespace {

constexpr char kUsage[] =
    "usage: fanout_floor --listen HOST:PORT --update-bytes N\n";

// One update of exactly `bytes` bytes (at least the header's): the group,
// the generation and a server_id padded to size.
grpc::ByteBuffer Encode(const std::string& group, uint64_t generation,
                        int bytes) {
  aside::v1::GroupUpdate u;
  u.set_group(group);
  u.set_generation(generation);
  u.mutable_delta()->set_base_generation(generation - 1);
  // The padding's own tag and length take 2-3 bytes; converge in a few
  // tries.
  std::string pad;
  for (int i = 0; i < 4; ++i) {
    u.set_server_id(pad);
    const int size = static_cast<int>(u.ByteSizeLong());
    if (size == bytes || (size > bytes && pad.empty())) {
      break;
    }
    pad.resize(static_cast<size_t>(
        std::max<int>(0, static_cast<int>(pad.size()) + bytes - size)));
  }
  std::string wire = u.SerializeAsString();
  grpc::Slice slice(wire);
  return grpc::ByteBuffer(&slice, 1);
}

class Hub;

class Stream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Stream(Hub* hub, std::string group) : hub_(hub), group_(std::move(group)) {}
  // Queues `update`; writes it now if no write is in flight, otherwise it
  // replaces what was queued.
  void Offer(const grpc::ByteBuffer& update) {
    aside::MutexLock lock(&mu_);
    if (finished_) {
      return;
    }
    if (writing_) {
      queued_ = update;
      has_queued_ = true;
      return;
    }
    buffer_ = update;
    writing_ = true;
    StartWrite(&buffer_);
  }
  void OnWriteDone(bool ok) override {
    aside::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    if (has_queued_ && !finished_) {
      buffer_ = std::move(queued_);
      has_queued_ = false;
      writing_ = true;
      StartWrite(&buffer_);
    }
  }
  void OnCancel() override {
    aside::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }
  void OnDone() override;

 private:
  void FinishLocked(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finished_) {
      finished_ = true;
      Finish(status);
    }
  }

  Hub* const hub_;
  const std::string group_;
  aside::Mutex mu_;
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer queued_ ABSL_GUARDED_BY(mu_);
  bool has_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

class Hub {
 public:
  explicit Hub(int update_bytes) : update_bytes_(update_bytes) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(const std::string& group) {
    auto* stream = new Stream(this, group);
    // Under mu_, so that no newer update can reach the stream first.
    aside::MutexLock lock(&mu_);
    Group& g = GroupLocked(group);
    g.streams.insert(stream);
    stream->Offer(g.current);
    return stream;
  }
  void Erase(Stream* stream, const std::string& group) {
    aside::MutexLock lock(&mu_);
    GroupLocked(group).streams.erase(stream);
  }
  // Encodes the group's next generation once and offers it to each of its
  // streams.
  uint64_t Publish(const std::string& group) {
    aside::MutexLock lock(&mu_);
    Group& g = GroupLocked(group);
    ++g.generation;
    g.current = Encode(group, g.generation, update_bytes_);
    for (Stream* s : g.streams) {
      s->Offer(g.current);
    }
    return g.generation;
  }
  uint64_t generation(const std::string& group) {
    aside::MutexLock lock(&mu_);
    return GroupLocked(group).generation;
  }

 private:
  struct Group {
    std::set<Stream*> streams;
    uint64_t generation = 1;
    grpc::ByteBuffer current;
  };
  Group& GroupLocked(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, added] = groups_.try_emplace(name);
    if (added) {
      it->second.current = Encode(name, 1, update_bytes_);
    }
    return it->second;
  }

  const int update_bytes_;
  aside::Mutex mu_;
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
};

void Stream::OnDone() {
  hub_->Erase(this, group_);
  delete this;
}

class Watcher final
    : public aside::v1::LoadBalancer::WithRawCallbackMethod_Watch<
          aside::v1::LoadBalancer::Service> {
 public:
  explicit Watcher(Hub* hub) : hub_(hub) {}
  // A stream follows the first group its request names.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(
      grpc::CallbackServerContext*, const grpc::ByteBuffer* request) override {
    aside::v1::WatchRequest parsed;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (request->Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()),
                     slice.size());
      }
    }
    const std::string group =
        parsed.ParseFromString(bytes) && parsed.groups_size() > 0
            ? parsed.groups(0)
            : "fanout";
    return hub_->Start(group);
  }

 private:
  Hub* const hub_;
};

class Admin final : public aside::v1::Admin::CallbackService {
 public:
  explicit Admin(Hub* hub) : hub_(hub) {}
  grpc::ServerUnaryReactor* CreateGroup(
      grpc::CallbackServerContext* context,
      const aside::v1::CreateGroupRequest* request,
      aside::v1::Group* response) override {
    response->set_name(request->group().name());
    response->set_generation(hub_->generation(request->group().name()));
    return Ok(context);
  }
  grpc::ServerUnaryReactor* DeleteGroup(
      grpc::CallbackServerContext* context,
      const aside::v1::DeleteGroupRequest*,
      aside::v1::DeleteGroupResponse*) override {
    return Ok(context);
  }
  grpc::ServerUnaryReactor* DrainBackends(
      grpc::CallbackServerContext* context,
      const aside::v1::DrainBackendsRequest* request,
      aside::v1::Group* response) override {
    response->set_name(request->group());
    response->set_generation(hub_->Publish(request->group()));
    return Ok(context);
  }

 private:
  static grpc::ServerUnaryReactor* Ok(grpc::CallbackServerContext* context) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  Hub* const hub_;
};

std::atomic<bool> g_stop{false};

}  // namespace

int main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args =
          aside::ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::cerr << "fanout_floor: " << args.status().message() << "\n" << kUsage;
    return 2;
  }
  // As the server does (server/server.cc): Debian's abseil checks lock
  // order unless told not to.
  if (!absl::GetFlag(FLAGS_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  Hub hub(absl::GetFlag(FLAGS_update_bytes));
  Watcher watcher(&hub);
  Admin admin(&hub);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&watcher);
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "fanout_floor: cannot listen on "
              << absl::GetFlag(FLAGS_listen) << "\n";
    return 1;
  }
  std::printf("port=%d\n", port);
  std::fflush(stdout);
  signal(SIGTERM, [](int) { g_stop.store(true); });
  signal(SIGINT, [](int) { g_stop.store(true); });
  while (!g_stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
