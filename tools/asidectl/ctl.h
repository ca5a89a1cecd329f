// Ctl: asidectl's commands against one server, over one channel. Used from
// main only, on the main thread, once per process.
//
// The commands are implemented by concern:
//   ctl.cc             dispatch, call contexts, error and usage reporting
//   read_commands.cc   groups, group, targets, members, pick, watch
//   write_commands.cc  create-group (flags or a group file), delete-group,
//                      add-backend, remove-backend, drain, undrain,
//                      apply-changes (a file of many changes)
//   status_view.cc     status, and the --watch redraw of the read commands
// xds-bootstrap calls no server and lives in main.cc.
//
// Every command returns the process's exit code: 0 success, 1 the RPC
// failed (the gRPC status is printed to stderr), or kUsageError, with
// usage_error() saying what was wrong (main prints it with the usage text
// and exits 2).
#ifndef ASIDE_TOOLS_ASIDECTL_CTL_H_
#define ASIDE_TOOLS_ASIDECTL_CTL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"

namespace aside::asidectl {

class Ctl {
 public:
  // What a command returns for a usage error.
  static constexpr int kUsageError = -2;

  // Reads --json and --timeout; `token` may be empty (no Admin token).
  Ctl(const std::shared_ptr<grpc::Channel>& channel, std::string token);

  // Runs `command` with its positional arguments `a`: once, or every
  // --interval with --watch.
  int Run(const std::string& command, const std::vector<std::string>& a);

  // The last usage error, after a command returned kUsageError.
  const std::string& usage_error() const { return usage_error_; }

 private:
  using Args = std::vector<std::string>;

  // ctl.cc
  int RunOnce(const std::string& command, const Args& a);
  // A context carrying the token and, unless `deadline` is false, the
  // --timeout deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true);
  // Prints the failed call's status (and a hint for some codes); returns 1.
  int Fail(const grpc::Status& s);
  // Records a usage error; returns kUsageError.
  int UsageFail(absl::string_view message);
  // True (recording "missing `what`") when `a` has fewer than `min`
  // arguments.
  bool Missing(const Args& a, size_t min, const char* what);

  // read_commands.cc
  int Groups(const Args& a);
  int GetGroup(const Args& a);
  int PrintGroup(const v1::Group& g);
  int Targets(const Args& a);
  int Members(const Args& a);
  int PickCmd(const Args& a);
  int Watch(const Args& a);

  // write_commands.cc
  int CreateGroup(const Args& a);
  int CreateOne(const v1::Group& group);
  int DeleteGroup(const Args& a);
  int AddBackends(const Args& a);
  int RemoveBackends(const Args& a);
  int Drain(const Args& a, bool drained);
  // drain --wait: WaitDrained in short rounds until drained or --timeout.
  int WaitDrained(const std::string& group,
                  const std::vector<std::string>& addresses);
  // A file of changes (YAML or protobuf JSON of an ApplyGroupChangesRequest)
  // through ApplyGroupChanges: a line per change; 1 when any failed.
  int ApplyChanges(const Args& a);
  // Prints the result of a call that changed a group; `what` says what.
  int Changed(const grpc::Status& s, const v1::Group& out,
              const std::string& what);
  // ADDR[=WEIGHT].
  static absl::StatusOr<v1::Backend> ParseBackend(const std::string& spec);
  static absl::StatusOr<std::vector<v1::Group>> LoadGroups(
      const std::string& path);

  // status_view.cc
  int Status(const Args& a);
  int Redraw(const std::string& command, const Args& a);

  const bool json_;
  const absl::Duration timeout_;
  const std::string token_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_;
  // The command being run, for error messages.
  std::string command_;
  std::string usage_error_;
};

}  // namespace aside::asidectl

#endif  // ASIDE_TOOLS_ASIDECTL_CTL_H_
