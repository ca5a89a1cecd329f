// Shared by the stub's and asidectl's tests against the real server: a
// config with file-owned groups, and a small Admin client.
#ifndef ASIDE_TESTS_CLIENT_CLIENT_HELPERS_H_
#define ASIDE_TESTS_CLIENT_CLIENT_HELPERS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"

namespace aside::testing {

inline constexpr char kClientTestToken[] = "client-test-admin-token-0123";

// Probing is off (kind none) so that backends count as healthy without
// anything listening there.
inline constexpr char kClientTestConfig[] = R"(groups:
  - name: rr
    policy: round_robin
    health_check: {kind: none}
    backends:
      - 127.0.0.1:9001
      - 127.0.0.1:9002
      - 127.0.0.1:9003
  - name: wrr
    policy: weighted_round_robin
    health_check: {kind: none}
    backends:
      - address: 127.0.0.1:9101
        weight: 500
        locality: {region: local, zone: a}
        metadata: {version: v2}
      - address: 127.0.0.1:9102
        weight: 100
      - address: 127.0.0.1:9103
        weight: 100
)";

class Admin {
 public:
  explicit Admin(const std::string& target,
                 std::string token = kClientTestToken)
      : stub_(v1::Admin::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        token_(std::move(token)) {}

  absl::StatusOr<v1::Group> Get(const std::string& name) {
    v1::GetGroupRequest req;
    req.set_name(name);
    v1::Group out;
    auto ctx = Context();
    return Done(stub_->GetGroup(ctx.get(), req, &out), out);
  }

  absl::StatusOr<v1::Group> Create(const std::string& name,
                                   const std::vector<std::string>& addresses) {
    v1::CreateGroupRequest req;
    req.mutable_group()->set_name(name);
    req.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    for (const std::string& a : addresses) {
      req.mutable_group()->add_backends()->set_address(a);
    }
    v1::Group out;
    auto ctx = Context();
    return Done(stub_->CreateGroup(ctx.get(), req, &out), out);
  }

  absl::StatusOr<v1::Group> Drain(const std::string& group,
                                  const std::string& address, bool drained) {
    v1::DrainBackendsRequest req;
    req.set_group(group);
    req.add_addresses(address);
    req.set_drained(drained);
    v1::Group out;
    auto ctx = Context();
    return Done(stub_->DrainBackends(ctx.get(), req, &out), out);
  }

  absl::StatusOr<v1::DeleteGroupResponse> Delete(const std::string& name) {
    v1::DeleteGroupRequest req;
    req.set_name(name);
    v1::DeleteGroupResponse out;
    auto ctx = Context();
    return Done(stub_->DeleteGroup(ctx.get(), req, &out), out);
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    return c;
  }
  template <typename T>
  static absl::StatusOr<T> Done(const grpc::Status& s, const T& out) {
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          s.error_message());
    }
    return out;
  }

  std::unique_ptr<v1::Admin::Stub> stub_;
  std::string token_;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_CLIENT_CLIENT_HELPERS_H_
