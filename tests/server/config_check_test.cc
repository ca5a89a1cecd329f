// --check-config loads every file the config names, as start-up does.
#include "server/config_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

class ConfigCheckTest : public ::testing::Test {
 protected:
  // A self-signed certificate and its key, and a second, unrelated key.
  void SetUp() override {
    for (const char* name : {"a", "b"}) {
      auto r = aside::testing::RunCommand(
          {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
           "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj",
           "/CN=aside-test", "-keyout", Path(std::string(name) + ".key"),
           "-out", Path(std::string(name) + ".crt")});
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  std::string Path(const std::string& name) const {
    return dir_.path() + "/" + name;
  }

  aside::testing::TempDir dir_;
};

TEST_F(ConfigCheckTest, NothingNamedIsFine) {
  EXPECT_OK(CheckReferencedFiles(ServerConfig{}));
}

TEST_F(ConfigCheckTest, FilesThatLoadPass) {
  ServerConfig c;
  c.session_key_file = dir_.WriteSecret("key", std::string(32, 'k'));
  c.admin_token_file =
      dir_.WriteSecret("tokens", "0123456789abcdef-token admin\n");
  c.tls_cert_file = Path("a.crt");
  c.tls_key_file = Path("a.key");
  c.tls_client_ca_file = Path("b.crt");
  EXPECT_OK(CheckReferencedFiles(c));
}

TEST_F(ConfigCheckTest, EveryMissingOrBrokenFileIsNamed) {
  ServerConfig c;
  c.session_key_file = Path("no-such-key");
  c.admin_token_file = Path("no-such-tokens");
  c.tls_cert_file = Path("no-such.crt");
  c.tls_key_file = Path("no-such.key");
  c.tls_client_ca_file = Path("no-such-ca.crt");
  absl::Status s = CheckReferencedFiles(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  for (const char* file : {"no-such-key: cannot open session key file",
                           "no-such-tokens: cannot open admin token file",
                           "no-such.crt: cannot open TLS certificate",
                           "no-such.key: cannot open TLS private key",
                           "no-such-ca.crt: cannot open TLS client CA"}) {
    EXPECT_THAT(s.message(), HasSubstr(file));
  }

  c = ServerConfig{};
  c.session_key_file = dir_.WriteFile("short", "too short");
  c.admin_token_file = dir_.WriteSecret("tokens", "tok admin\n");
  c.tls_cert_file = dir_.WriteFile("garbage.crt", "not a certificate\n");
  c.tls_key_file = Path("a.key");
  c.tls_client_ca_file = Path("a.key");  // a key, not a certificate
  s = CheckReferencedFiles(c);
  EXPECT_THAT(s.message(), HasSubstr("short: session key shorter than 16"));
  EXPECT_THAT(s.message(), HasSubstr("tokens:1: token shorter than 16"));
  EXPECT_THAT(s.message(), HasSubstr("garbage.crt: no PEM certificate"));
  EXPECT_THAT(s.message(),
              HasSubstr(Path("a.key") + ": no PEM certificate in the file"));
}

TEST_F(ConfigCheckTest, AKeyThatDoesNotMatchTheCertificateIsAnError) {
  ServerConfig c;
  c.tls_cert_file = Path("a.crt");
  c.tls_key_file = Path("b.key");
  EXPECT_THAT(CheckReferencedFiles(c),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("b.key: the private key does not match the "
                                 "certificate")));
}

TEST_F(ConfigCheckTest, EtcdStoreFilesAreLoadedToo) {
  ServerConfig c;
  c.store.type = "etcd";
  c.store.endpoints = {"127.0.0.1:2379"};
  c.store.ca_file = Path("b.crt");
  c.store.cert_file = Path("a.crt");
  c.store.key_file = Path("a.key");
  c.store.credentials_file = dir_.WriteFile("etcd-auth", "aside:s3cret\n");
  EXPECT_OK(CheckReferencedFiles(c));

  c.store.ca_file = Path("no-such-etcd-ca.crt");
  c.store.key_file = Path("b.key");
  c.store.credentials_file = dir_.WriteFile("etcd-auth", "just-a-password\n");
  absl::Status s = CheckReferencedFiles(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("no-such-etcd-ca.crt: cannot open etcd CA bundle"));
  EXPECT_THAT(s.message(), HasSubstr("b.key: the private key does not match"));
  EXPECT_THAT(s.message(),
              HasSubstr("etcd-auth: expected one line \"username:password\""));

  // The SQLite store names no such files, whatever the etcd block held.
  c.store.type = "sqlite";
  EXPECT_OK(CheckReferencedFiles(c));
}

TEST_F(ConfigCheckTest, SecretFilesEveryoneMayReadAreNamedWithTheirMode) {
  ServerConfig c;
  c.admin_token_file =
      dir_.WriteSecret("tokens", "0123456789abcdef-token admin\n");
  c.session_key_file = dir_.WriteSecret("key", std::string(32, 'k'));
  c.tls_key_file = Path("a.key");
  ASSERT_EQ(chmod(c.admin_token_file.c_str(), 0644), 0);
  ASSERT_EQ(chmod(c.session_key_file.c_str(), 0440), 0);  // group: passes
  ASSERT_EQ(chmod(c.tls_key_file.c_str(), 0604), 0);
  const std::vector<std::string> warnings = SecretFilesReadableByOthers(c);
  ASSERT_EQ(warnings.size(), 2u) << ::testing::PrintToString(warnings);
  EXPECT_THAT(warnings[0], HasSubstr("tokens: admin token file is readable "
                                     "by every user (mode 0644)"));
  EXPECT_THAT(warnings[1],
              HasSubstr("a.key: TLS private key is readable by every user "
                        "(mode 0604)"));
  // The warning does not make the check fail.
  EXPECT_OK(CheckReferencedFiles(c));

  ASSERT_EQ(chmod(c.admin_token_file.c_str(), 0600), 0);
  ASSERT_EQ(chmod(c.tls_key_file.c_str(), 0640), 0);
  EXPECT_THAT(SecretFilesReadableByOthers(c), ::testing::IsEmpty());
}

}  // namespace
}  // namespace aside::server
