#include "server/api/xds/resource_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/api/grpclb_service.h"

namespace aside::server::xds {

namespace {

bool RingHash(const GroupSpec& spec, bool ring_hash_safe) {
  return ring_hash_safe && IsHashPolicy(spec.policy.kind);
}

}  // namespace

ResourceCache::Found ResourceCache::Listener(const std::string& name,
                                             bool ring_hash_safe) const {
  Found out;
  out.group = ResolveGrpclbName(*groups_, name);
  if (out.group == nullptr) {
    return out;
  }
  const std::shared_ptr<const Group::Publication> published =
      out.group->published();
  const GroupSpec& spec = *published->spec;
  const bool hashing = RingHash(spec, ring_hash_safe);
  out.ring_hash_fallback = !ring_hash_safe && IsHashPolicy(spec.policy.kind);
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
  Found out;
  out.group = groups_->Find(name);
  if (out.group == nullptr) {
    return out;
  }
  const std::shared_ptr<const Group::Publication> published =
      out.group->published();
  const GroupSpec& spec = *published->spec;
  const bool hashing = RingHash(spec, ring_hash_safe);
  out.ring_hash_fallback = !ring_hash_safe && IsHashPolicy(spec.policy.kind);
  out.resource = published->spec_forms->Get<Resource>(
      absl::StrCat("cds/", hashing ? "hash/" : "", typed ? "typed" : ""), 0,
      [&] {
        return MakeResource(name, BuildCluster(name, spec.policy, hashing,
                                               spec.outlier, typed));
      });
  return out;
}

ResourceCache::Found ResourceCache::Endpoints(const std::string& name) const {
  Found out;
  out.group = groups_->Find(name);
  if (out.group == nullptr) {
    return out;
  }
  const std::shared_ptr<const Group::Publication> published =
      out.group->published();
  const GrpclbSpec& drops = published->spec->grpclb;
  // Overload drops are grpclb's: the load view's level for the group (read
  // at most once a second, the same for every edge), in whole percent.
  const int overload =
      loads_ != nullptr
          ? static_cast<int>(std::lround(
                loads_->OverloadFraction(name, drops.max_requests_per_second) *
                100))
          : 0;
  out.resource = published->forms.Get<Resource>(
      "eds", static_cast<uint64_t>(overload), [&] {
        return MakeResource(
            name, BuildLoadAssignment(*published->table,
                                      drops.drop_in_panic_percent,
                                      overload / 100.0));
      });
  return out;
}

}  // namespace aside::server::xds
