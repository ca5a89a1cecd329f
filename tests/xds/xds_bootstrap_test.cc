// The bootstrap `asidectl xds-bootstrap` prints for stock xDS clients (the
// stock clients in xds_clients_test run with it).
#include "client/xds_bootstrap.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::testing::HasSubstr;

TEST(XdsBootstrapTest, NamesTheServerAndKeepsConfigOnDeletion) {
  ASSERT_OK_AND_ASSIGN(
      const std::string json,
      XdsBootstrapJson({.server = "[::1]:50051", .node_id = "web-\"7\""}));
  EXPECT_THAT(json, HasSubstr(R"("server_uri": "[::1]:50051")"));
  EXPECT_THAT(json, HasSubstr(R"("ignore_resource_deletion")"));
  EXPECT_THAT(json, HasSubstr(R"("xds_v3")"));
  EXPECT_THAT(json, HasSubstr(R"("id": "web-\"7\"")"));
}

TEST(XdsBootstrapTest, TheNodeAlwaysCarriesALocality) {
  // grpc-js-xds refuses a node without a locality object.
  ASSERT_OK_AND_ASSIGN(const std::string plain,
                       XdsBootstrapJson({.server = "aside:1"}));
  EXPECT_THAT(plain, HasSubstr(R"("locality": {"region": "", "zone": "", )"
                               R"("sub_zone": ""})"));
  ASSERT_OK_AND_ASSIGN(
      const std::string placed,
      XdsBootstrapJson({.server = "aside:1", .region = "eu", .zone = "eu-1a"}));
  EXPECT_THAT(placed, HasSubstr(R"("region": "eu", "zone": "eu-1a")"));
}

TEST(XdsBootstrapTest, TlsCredentialsNameTheirFiles) {
  ASSERT_OK_AND_ASSIGN(const std::string json,
                       XdsBootstrapJson({.server = "aside:1",
                                         .tls_ca_file = "/ca.pem",
                                         .tls_cert_file = "/c.pem",
                                         .tls_key_file = "/k.pem"}));
  EXPECT_THAT(json, HasSubstr(R"("type": "tls")"));
  EXPECT_THAT(json, HasSubstr(R"("ca_certificate_file": "/ca.pem")"));
  EXPECT_THAT(json, HasSubstr(R"("certificate_file": "/c.pem")"));
  EXPECT_THAT(json, HasSubstr(R"("private_key_file": "/k.pem")"));
  EXPECT_FALSE(
      XdsBootstrapJson({.server = "aside:1", .tls_cert_file = "/c.pem"}).ok());
}

TEST(XdsBootstrapTest, RejectsAServerWithoutAPort) {
  for (const char* server : {"aside", "aside:", ":50051", "aside:70000"}) {
    EXPECT_FALSE(XdsBootstrapJson({.server = server}).ok()) << server;
  }
  EXPECT_FALSE(XdsBootstrapJson({.server = "aside:1", .node_id = ""}).ok());
}

}  // namespace
}  // namespace aside
