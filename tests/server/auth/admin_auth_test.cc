// The admin token file: every line that configures nothing, or configures
// one token twice, stops the server with the file and line named.
#include "server/auth/admin_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

class AdminAuthFileTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<AdminAuth>> Load(const std::string& text) {
    path_ = dir_.WriteSecret("tokens", text);
    return AdminAuth::Create(path_, {});
  }

  aside::testing::TempDir dir_;
  std::string path_;
};

TEST_F(AdminAuthFileTest, TokensAndRolesAreRead) {
  ASSERT_OK_AND_ASSIGN(auto auth, Load("# ops\n"
                                       "admin-token-0123456789 admin\n"
                                       "\n"
                                       "read-token-0123456789\tread\n"));
  EXPECT_TRUE(auth->configured());
  EXPECT_EQ(auth->RoleOfToken("admin-token-0123456789"), AdminRole::kAdmin);
  EXPECT_EQ(auth->RoleOfToken("read-token-0123456789"), AdminRole::kRead);
  EXPECT_EQ(auth->RoleOfToken("other-token-0123456789"), AdminRole::kNone);
}

TEST_F(AdminAuthFileTest, ASelfDrainTokenGrantsNothingElse) {
  ASSERT_OK_AND_ASSIGN(auto auth, Load("pod-token-0123456789 self-drain pods\n"
                                       "admin-token-0123456789 admin\n"));
  EXPECT_EQ(auth->RoleOfToken("pod-token-0123456789"), AdminRole::kSelfDrain);
  for (AdminRole needed :
       {AdminRole::kRead, AdminRole::kAdmin, AdminRole::kReport}) {
    EXPECT_FALSE(RoleGrants(AdminRole::kSelfDrain, needed));
  }
  // What an admin drains is not bounded by its address: it never needs
  // the self-drain rule (AuthorizeDrain), and does not hold that role.
  EXPECT_FALSE(RoleGrants(AdminRole::kAdmin, AdminRole::kSelfDrain));
  EXPECT_TRUE(RoleGrants(AdminRole::kSelfDrain, AdminRole::kSelfDrain));
}

TEST_F(AdminAuthFileTest, AnUnknownRoleIsRefusedWithItsLine) {
  auto auth = Load(
      "admin-token-0123456789 admin\n"
      "pod-token-0123456789 self_drain\n");
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(),
              HasSubstr(path_ + ":2: unknown role 'self_drain' (allowed: "
                                "admin, read, report, self-drain)"));
}

TEST_F(AdminAuthFileTest, AnEmptyFileIsRefused) {
  auto auth = Load("");
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(), HasSubstr(path_ + ":1: no tokens"));
}

TEST_F(AdminAuthFileTest, AFileOfCommentsIsRefused) {
  auto auth = Load("# nobody yet\n\n# still nobody\n");
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(), HasSubstr(path_ + ":4: no tokens"));
}

TEST_F(AdminAuthFileTest, OneTokenWithTwoRolesIsRefused) {
  auto auth = Load(
      "same-token-0123456789 read\n"
      "# later\n"
      "same-token-0123456789 admin\n");
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(),
              HasSubstr(path_ + ":3: token already listed on line 1"));
}

TEST_F(AdminAuthFileTest, AMissingFileIsNamed) {
  auto auth = AdminAuth::Create(dir_.path() + "/absent", {});
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(auth.status().message(), HasSubstr("absent: cannot open"));
}

}  // namespace
}  // namespace aside::server
