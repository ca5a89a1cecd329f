#include "server/api/xds/resource_cache.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/api/grpclb_service.h"

namespace aside::server::xds {

namespace {

// `group` (null: none answers the name) into `out`; its newest publication
// and whether the client is offered a ring for it (`ring_hash`: in the
// enum form, `typed`: in the typed list); a hash group offered none is a
// fallback.
std::shared_ptr<const Group::Publication> FoundGroup(GroupPtr group,
                                                     bool ring_hash, bool typed,
                                                     ResourceCache::Found* out,
                                                     bool* hashing) {
  out->group = std::move(group);
  if (out->group == nullptr) {
    return nullptr;
  }
  std::shared_ptr<const Group::Publication> published = out->group->published();
  const bool hash_policy = IsHashPolicy(published->spec->policy.kind);
  *hashing = ring_hash && hash_policy;
  out->ring_hash_fallback = !ring_hash && !typed && hash_policy;
  return published;
}

}  // namespace

ResourceCache::Found ResourceCache::Listener(const std::string& name,
                                             bool ring_hash_safe,
                                             bool typed) const {
  return ListenerOf(name, ResolveGrpclbName(*groups_, name), ring_hash_safe,
                    typed);
}

ResourceCache::Found ResourceCache::ListenerOf(const std::string& name,
                                               GroupPtr group,
                                               bool ring_hash_safe,
                                               bool typed) const {
  Found out;
  bool hashing = false;
  // The route hashes for every client offered a ring, in either form.
  const auto published = FoundGroup(std::move(group), ring_hash_safe || typed,
                                    typed, &out, &hashing);
  if (published == nullptr) {
    return out;
  }
  // The listener follows from the group's name and whether it hashes: a
  // form of the spec, kept across publications that leave the spec as it
  // was. The target name is the client's: many spellings reach one group
  // ("web.a", "web.b" by first label), which PublishedForms bounds.
  out.resource = published->spec_forms->Get<Resource>(
      absl::StrCat("lds/", hashing ? "hash/" : "", name), 0, [&] {
        return MakeResource(name,
                            BuildListener(name, out.group->name(), hashing));
      });
  return out;
}

ResourceCache::Found ResourceCache::Cluster(const std::string& name,
                                            bool ring_hash_safe,
                                            bool typed) const {
  return ClusterOf(name, groups_->Find(name), ring_hash_safe, typed);
}

ResourceCache::Found ResourceCache::ClusterOf(const std::string& name,
                                              GroupPtr group,
                                              bool ring_hash_safe,
                                              bool typed) const {
  Found out;
  bool hashing = false;
  const auto published =
      FoundGroup(std::move(group), ring_hash_safe, typed, &out, &hashing);
  if (published == nullptr) {
    return out;
  }
  const GroupSpec& spec = *published->spec;
  out.resource = published->spec_forms->Get<Resource>(
      absl::StrCat("cds/", hashing ? "hash/" : "", typed ? "typed" : ""), 0,
      [&] {
        return MakeResource(name, BuildCluster(name, spec.policy, hashing,
                                               spec.outlier, typed));
      });
  return out;
}

ResourceCache::Found ResourceCache::Endpoints(const std::string& name) const {
  return EndpointsOf(name, groups_->Find(name));
}

int ResourceCache::OverloadPercent(const std::string& name,
                                   const Group::Publication& published) const {
  // Overload drops are grpclb's: the load view's level for the group (read
  // at most once a second, the same for every edge), in whole percent.
  const double limit = published.spec->grpclb.max_requests_per_second;
  if (loads_ == nullptr || limit <= 0) {
    return 0;
  }
  return static_cast<int>(
      std::lround(loads_->OverloadFraction(name, limit) * 100));
}

ResourceCache::Found ResourceCache::EndpointsOf(const std::string& name,
                                                GroupPtr group) const {
  Found out;
  out.group = std::move(group);
  if (out.group == nullptr) {
    return out;
  }
  const std::shared_ptr<const Group::Publication> published =
      out.group->published();
  const GrpclbSpec& drops = published->spec->grpclb;
  const int overload = OverloadPercent(name, *published);
  out.generation = published->table->generation();
  out.resource = published->forms.Get<Resource>(
      "eds", static_cast<uint64_t>(overload), [&] {
        return MakeResource(
            name,
            BuildLoadAssignment(*published->table, drops.drop_in_panic_percent,
                                overload / 100.0));
      });
  return out;
}

}  // namespace aside::server::xds
