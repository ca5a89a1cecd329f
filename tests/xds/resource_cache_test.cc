// The encode-once store: every stream asking for the same resource of the
// same generation gets the same encoded object; a change visible to
// clients gives a new version, and an update that changes nothing they see
// keeps it.
#include "server/api/xds/resource_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "tests/testing/status_matchers.h"

namespace aside::server::xds {
namespace {

Backend Member(const std::string& address, uint32_t weight = 100) {
  Backend b;
  b.address = address;
  b.weight = weight;
  return b;
}

GroupSpec Spec(std::vector<Backend> backends,
               PolicyKind kind = PolicyKind::kWeightedRoundRobin) {
  GroupSpec spec;
  spec.name = "web";
  spec.aliases = {"payments.example.internal"};
  spec.policy.kind = kind;
  spec.health_check.kind = HealthCheckSpec::Kind::kNone;
  spec.backends = std::move(backends);
  return spec;
}

class ResourceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
    ASSERT_OK(registry_->Add(
        Spec({Member("10.0.0.1:80", 300), Member("10.0.0.2:80")})));
  }

  std::unique_ptr<GroupRegistry> registry_;
};

TEST_F(ResourceCacheTest, StreamsShareOneEncodingPerGeneration) {
  ResourceCache cache(registry_.get());
  const ResourcePtr a = cache.Endpoints("web").resource;
  const ResourcePtr b = cache.Endpoints("web").resource;
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.Cluster("web", false).resource.get(),
            cache.Cluster("web", false).resource.get());
  EXPECT_EQ(cache.Listener("web", false).resource.get(),
            cache.Listener("web", false).resource.get());
}

TEST_F(ResourceCacheTest, AVisibleChangeIsANewVersionAnInvisibleOneIsNot) {
  ResourceCache cache(registry_.get());
  const ResourcePtr before = cache.Endpoints("web").resource;
  GroupPtr web = registry_->Find("web");
  // A new generation whose endpoints are the same: same version.
  GroupSpec same = Spec({Member("10.0.0.1:80", 300), Member("10.0.0.2:80")});
  same.aliases.push_back("web.example.internal");
  ASSERT_OK(web->Update(same));
  EXPECT_EQ(cache.Endpoints("web").resource->version, before->version);
  // A weight change: a new version.
  ASSERT_OK(
      web->Update(Spec({Member("10.0.0.1:80", 100), Member("10.0.0.2:80")})));
  EXPECT_NE(cache.Endpoints("web").resource->version, before->version);
}

TEST_F(ResourceCacheTest, NamesResolveLikeGrpclbNames) {
  ResourceCache cache(registry_.get());
  for (const char* name :
       {"web", "web:8080", "web.prod.svc", "payments.example.internal"}) {
    ResourceCache::Found f = cache.Listener(name, false);
    ASSERT_NE(f.resource, nullptr) << name;
    EXPECT_EQ(f.resource->name, name);
    EXPECT_EQ(f.group->name(), "web");
  }
  EXPECT_EQ(cache.Listener("nosuch", false).resource, nullptr);
  EXPECT_EQ(cache.Cluster("web.prod.svc", false).resource, nullptr)
      << "clusters are named by the group itself";
}

TEST_F(ResourceCacheTest, HashGroupsFallBackForUnsafeClientsOnly) {
  ASSERT_OK(registry_->Find("web")->Update(Spec(
      {Member("10.0.0.1:80"), Member("10.0.0.2:80")}, PolicyKind::kKetama)));
  ResourceCache cache(registry_.get());
  EXPECT_TRUE(cache.Cluster("web", false).ring_hash_fallback);
  EXPECT_FALSE(cache.Cluster("web", true).ring_hash_fallback);
  EXPECT_NE(cache.Cluster("web", false).resource->version,
            cache.Cluster("web", true).resource->version);
}

TEST_F(ResourceCacheTest, TypedPolicyClustersAreEncodedApart) {
  ResourceCache cache(registry_.get());
  const ResourcePtr typed = cache.Cluster("web", true, true).resource;
  ASSERT_NE(typed, nullptr);
  EXPECT_EQ(typed.get(), cache.Cluster("web", true, true).resource.get());
  EXPECT_NE(typed->version, cache.Cluster("web", true).resource->version);
  envoy::config::cluster::v3::Cluster c;
  ASSERT_TRUE(typed->any.UnpackTo(&c));
  EXPECT_TRUE(c.has_load_balancing_policy());
  ASSERT_TRUE(cache.Cluster("web", true).resource->any.UnpackTo(&c));
  EXPECT_FALSE(c.has_load_balancing_policy());
}

TEST_F(ResourceCacheTest, ADeletedGroupsResourcesAreGone) {
  ResourceCache cache(registry_.get());
  ASSERT_NE(cache.Endpoints("web").resource, nullptr);
  ASSERT_OK(registry_->Remove("web"));
  EXPECT_EQ(cache.Endpoints("web").resource, nullptr);
  EXPECT_EQ(cache.Listener("web", false).resource, nullptr);
}

}  // namespace
}  // namespace aside::server::xds
