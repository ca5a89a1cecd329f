#include "server/api/xds/resource_cache.h"

#include <algorithm>
#include <cmath>

#include "lib/sync.h"
#include "server/api/grpclb_service.h"

namespace aside::server::xds {

namespace {

// Target names are chosen by clients and many spellings reach one group
// ("web.a", "web.b" by first label): past this many cached listeners, new
// ones are built for the asking stream and not kept.
constexpr size_t kMaxCachedListeners = 10'000;

bool RingHash(const GroupSpec& spec, bool ring_hash_safe) {
  return ring_hash_safe && IsHashPolicy(spec.policy.kind);
}

}  // namespace

ResourceCache::Found ResourceCache::Listener(const std::string& name,
                                             bool ring_hash_safe) {
  Found out;
  out.group = ResolveGrpclbName(*groups_, name);
  if (out.group == nullptr) {
    return out;
  }
  std::shared_ptr<const GroupSpec> spec = out.group->spec_snapshot();
  const bool hashing = RingHash(*spec, ring_hash_safe);
  out.ring_hash_fallback = !ring_hash_safe && IsHashPolicy(spec->policy.kind);
  aside::MutexLock lock(&mu_);
  const std::pair<std::string, bool> key(name, hashing);
  if (listeners_.size() >= kMaxCachedListeners && !listeners_.contains(key)) {
    out.resource =
        MakeResource(name, BuildListener(name, out.group->name(), hashing));
    return out;
  }
  SpecEntry& e = listeners_[key];
  // The listener depends on the group's name and whether it hashes; a new
  // spec pointer means a publication that may have changed either.
  if (e.resource == nullptr || e.spec != spec) {
    ResourcePtr r =
        MakeResource(name, BuildListener(name, out.group->name(), hashing));
    if (e.resource == nullptr || e.resource->version != r->version) {
      e.resource = std::move(r);
    }
    e.spec = std::move(spec);
  }
  out.resource = e.resource;
  return out;
}

ResourceCache::Found ResourceCache::Cluster(const std::string& name,
                                            bool ring_hash_safe, bool typed) {
  Found out;
  out.group = groups_->Find(name);
  if (out.group == nullptr) {
    return out;
  }
  std::shared_ptr<const GroupSpec> spec = out.group->spec_snapshot();
  const bool hashing = RingHash(*spec, ring_hash_safe);
  out.ring_hash_fallback = !ring_hash_safe && IsHashPolicy(spec->policy.kind);
  aside::MutexLock lock(&mu_);
  SpecEntry& e = clusters_[{name, hashing, typed}];
  if (e.resource == nullptr || e.spec != spec) {
    ResourcePtr r = MakeResource(
        name, BuildCluster(name, spec->policy, hashing, spec->outlier, typed));
    if (e.resource == nullptr || e.resource->version != r->version) {
      e.resource = std::move(r);
    }
    e.spec = std::move(spec);
  }
  out.resource = e.resource;
  return out;
}

ResourceCache::Found ResourceCache::Endpoints(const std::string& name) {
  Found out;
  out.group = groups_->Find(name);
  if (out.group == nullptr) {
    return out;
  }
  // Every spec change takes a new generation, so the generation covers the
  // drop option too.
  TableConstPtr table = out.group->table();
  const GrpclbSpec drops = out.group->spec_snapshot()->grpclb;
  aside::MutexLock lock(&mu_);
  TableEntry& e = endpoints_[name];
  // Overload drops are grpclb's: the load view's level for the group (read
  // at most once a second, the same for every edge), in whole percent.
  const int overload =
      loads_ != nullptr
          ? static_cast<int>(std::lround(
                loads_->OverloadFraction(name, drops.max_requests_per_second) *
                100))
          : 0;
  if (e.resource == nullptr || e.generation != table->generation() ||
      e.overload_percent != overload) {
    ResourcePtr r = MakeResource(
        name, BuildLoadAssignment(*table, drops.drop_in_panic_percent,
                                  overload / 100.0));
    if (e.resource == nullptr || e.resource->version != r->version) {
      e.resource = std::move(r);
    }
    e.generation = table->generation();
    e.overload_percent = overload;
  }
  out.resource = e.resource;
  return out;
}

void ResourceCache::Prune() {
  aside::MutexLock lock(&mu_);
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    it = ResolveGrpclbName(*groups_, it->first.first) == nullptr
             ? listeners_.erase(it)
             : std::next(it);
  }
  for (auto it = clusters_.begin(); it != clusters_.end();) {
    it = groups_->Find(std::get<0>(it->first)) == nullptr ? clusters_.erase(it)
                                                          : std::next(it);
  }
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    it = groups_->Find(it->first) == nullptr ? endpoints_.erase(it)
                                             : std::next(it);
  }
}

}  // namespace aside::server::xds
