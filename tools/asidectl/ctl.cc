// Ctl's plumbing (ctl.h): which method runs a command, the contexts every
// call uses, and how failed calls and usage errors are reported.
#include "tools/asidectl/ctl.h"

#include <iostream>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/asidectl/flags.h"
#include "tools/asidectl/format.h"

namespace aside::asidectl {

Ctl::Ctl(const std::shared_ptr<grpc::Channel>& channel, std::string token)
    : json_(absl::GetFlag(FLAGS_json)),
      timeout_(absl::GetFlag(FLAGS_timeout).value_or(absl::Seconds(10))),
      token_(std::move(token)),
      admin_(v1::Admin::NewStub(channel)),
      lb_(v1::LoadBalancer::NewStub(channel)) {}

int Ctl::Run(const std::string& command, const Args& a) {
  command_ = command;
  if (absl::GetFlag(FLAGS_watch)) {
    if (command != "status" && command != "groups" && command != "group" &&
        command != "targets") {
      return UsageFail(
          "--watch: only with status, groups, group or targets (watch "
          "streams updates by itself)");
    }
    return Redraw(command, a);
  }
  return RunOnce(command, a);
}

int Ctl::RunOnce(const std::string& command, const Args& a) {
  if (command == "status") return Status(a);
  if (command == "groups") return Groups(a);
  if (command == "group") return GetGroup(a);
  if (command == "targets") return Targets(a);
  if (command == "members") return Members(a);
  if (command == "pick") return PickCmd(a);
  if (command == "watch") return Watch(a);
  if (command == "create-group") return CreateGroup(a);
  if (command == "delete-group") return DeleteGroup(a);
  if (command == "add-backend") return AddBackends(a);
  if (command == "remove-backend") return RemoveBackends(a);
  if (command == "drain") return Drain(a, true);
  if (command == "undrain") return Drain(a, false);
  if (command == "apply-changes") return ApplyChanges(a);
  return UsageFail(absl::StrCat("unknown command '", command, "'"));
}

std::unique_ptr<grpc::ClientContext> Ctl::Context(bool deadline) {
  auto c = std::make_unique<grpc::ClientContext>();
  if (deadline) {
    c->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  }
  if (!token_.empty()) {
    c->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
  return c;
}

int Ctl::Fail(const grpc::Status& s) {
  std::cout << std::flush;
  Say(absl::StrCat(
      "asidectl: ", command_, ": ",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
      ": ", s.error_message()));
  // A method the server does not have (as opposed to a feature inside a
  // method, whose message says what is missing).
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
      (s.error_message().empty() || command_ == "targets")) {
    Say(absl::StrCat("asidectl: this server does not implement ", command_,
                     " yet"));
  }
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && token_.empty()) {
    Say("asidectl: pass an Admin token with --token or ASIDE_TOKEN, or a "
        "token file with --token-file or ASIDE_TOKEN_FILE (make run writes "
        "var/demo-admin-token)");
  }
  return 1;
}

int Ctl::UsageFail(absl::string_view message) {
  usage_error_ = std::string(message);
  return kUsageError;
}

bool Ctl::Missing(const Args& a, size_t min, const char* what) {
  if (a.size() < min) {
    usage_error_ = absl::StrCat("missing ", what);
    return true;
  }
  return false;
}

}  // namespace aside::asidectl
