// The xDS resources of every group, each built and serialised once per
// publication (and variant) and the same bytes shared by every ADS stream
// that sends it, as Watch shares one encoding per generation. The built
// resources live in the group's publication (Group::Publication: Listener
// and Cluster, which follow from the spec alone, in its spec forms, kept
// while the spec is), so nothing here needs pruning.
//
// Thread-safe and lock-free here; a resource is built under its
// publication's lock (server/groups/published_forms.h), never twice for
// the same inputs. Lookups never call a group's mutating methods, so they
// may run from a group's publication callback.
#ifndef ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_
#define ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_

#include <string>

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
    // Endpoints: the generation of the group's table they were built from.
    uint64_t generation = 0;
  };

  // The Listener for a target name: resolved like a grpclb name (alias,
  // else the host's first label); `ring_hash_safe` (RingHashSafe) and
  // `typed` (ReadsTypedPolicies) as the client's Cluster has them, of which
  // either makes the route of a hash group hash.
  Found Listener(const std::string& name, bool ring_hash_safe,
                 bool typed = false) const;
  // The Cluster and the ClusterLoadAssignment of a group, by its name;
  // `typed`: with the typed policies (ReadsTypedPolicies).
  Found Cluster(const std::string& name, bool ring_hash_safe,
                bool typed = false) const;
  Found Endpoints(const std::string& name) const;

  // The same for a name already resolved to `group` (what the lookups
  // above find; null: none answers it): no registry lookup, so a stream
  // that keeps its names' groups fetches a publication's resources in
  // O(1) each.
  Found ListenerOf(const std::string& name, GroupPtr group, bool ring_hash_safe,
                   bool typed = false) const;
  Found ClusterOf(const std::string& name, GroupPtr group, bool ring_hash_safe,
                  bool typed = false) const;
  Found EndpointsOf(const std::string& name, GroupPtr group) const;

  // The group's overload drop level in whole percent, as its
  // ClusterLoadAssignment carries it (0 without a rate limit).
  int OverloadPercent(const std::string& name,
                      const Group::Publication& published) const;

 private:
  GroupRegistry* const groups_;
  const LoadAggregator* const loads_;
};

}  // namespace aside::server::xds

#endif  // ASIDE_SERVER_API_XDS_RESOURCE_CACHE_H_
