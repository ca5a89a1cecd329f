// Encode-once store of the xDS resources of every group: a resource is
// built and serialised once per (group table generation, spec, variant) and
// the same bytes are shared by every ADS stream that sends it, as Watch
// shares one encoding per generation.
//
// Thread-safe: one mutex guards the maps; building happens under it, so a
// resource is never built twice for the same inputs. Lookups read the
// group's table and spec lock-free and never call a group's mutating
// methods, so they may run from a group's publication callback.
#ifndef ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_
#define ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"
#include "server/api/xds/xds_resources.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::server::xds {

class ResourceCache {
 public:
  // `loads` (may be null) gives the request rate that overload drops
  // follow.
  explicit ResourceCache(GroupRegistry* groups,
                         const LoadAggregator* loads = nullptr)
      : groups_(groups), loads_(loads) {}

  struct Found {
    ResourcePtr resource;  // null when no group answers the name
    GroupPtr group;
    // The group hashes but the client gets the weighted fallback.
    bool ring_hash_fallback = false;
  };

  // The Listener for a target name: resolved like a grpclb name (alias,
  // else the host's first label).
  Found Listener(const std::string& name, bool ring_hash_safe);
  // The Cluster and the ClusterLoadAssignment of a group, by its name;
  // `typed`: with the typed policies (ReadsTypedPolicies).
  Found Cluster(const std::string& name, bool ring_hash_safe,
                bool typed = false);
  Found Endpoints(const std::string& name);

  // Forgets entries of groups that no longer exist.
  void Prune();

 private:
  struct SpecEntry {
    std::shared_ptr<const GroupSpec> spec;
    ResourcePtr resource;
  };
  struct TableEntry {
    // The generation encoded (not the table: the cache must not keep a
    // superseded table alive).
    uint64_t generation = 0;
    // The overload drop encoded, in whole percent.
    int overload_percent = 0;
    ResourcePtr resource;
  };

  GroupRegistry* const groups_;
  const LoadAggregator* const loads_;
  aside::Mutex mu_;
  // (name, hashing) → listener; (group, ring hash, typed) → cluster.
  std::map<std::pair<std::string, bool>, SpecEntry> listeners_
      ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, bool, bool>, SpecEntry> clusters_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, TableEntry> endpoints_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_
