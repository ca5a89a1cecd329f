// What the protocol edges derive from one publication of a group, built
// once and shared by every stream that sends it: a grpclb server list, an
// xDS resource. The forms live in the publication (Group::Publication), so
// they go when it is superseded and no stream holds them, and no edge keeps
// a cache of its own to prune.
//
// A form is found by its type and a variant the edge names (an xDS
// resource's kind and target name, say), and is built for its inputs: what
// it depends on besides the publication (the load view's overload level).
// One form is kept per type and variant, for the inputs asked last: when
// they change, the next caller builds it again.
//
// Thread-safe: mu_ guards the forms, and a form is built under it, so
// streams asking for the same form at once build it once (they wait for
// it). Cost: a hash lookup; building is the edge's.
#ifndef ASIDE_SERVER_GROUPS_PUBLISHED_FORMS_H_
#define ASIDE_SERVER_GROUPS_PUBLISHED_FORMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <typeindex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "lib/sync.h"

namespace aside::server {

class PublishedForms {
 public:
  // Variants are chosen by clients in part (xDS target names): past this
  // many forms in one publication, new ones are built for their caller and
  // not kept.
  static constexpr size_t kMaxForms = 1024;

  // The form of type T and `variant` for `inputs`; `build()` (returning
  // std::shared_ptr<const T>) makes it when none is kept for them.
  template <typename T, typename Build>
  std::shared_ptr<const T> Get(const std::string& variant, uint64_t inputs,
                               Build&& build) {
    const Key key(std::type_index(typeid(T)), variant);
    aside::MutexLock lock(&mu_);
    auto it = forms_.find(key);
    if (it == forms_.end()) {
      if (forms_.size() >= kMaxForms) {
        return std::forward<Build>(build)();
      }
      it = forms_.emplace(key, Slot{}).first;
    }
    Slot& slot = it->second;
    if (slot.form == nullptr || slot.inputs != inputs) {
      std::shared_ptr<const T> form = std::forward<Build>(build)();
      slot.inputs = inputs;
      slot.form = form;
      return form;
    }
    return std::static_pointer_cast<const T>(slot.form);
  }

  // Forms kept.
  size_t size() const {
    aside::MutexLock lock(&mu_);
    return forms_.size();
  }

 private:
  using Key = std::pair<std::type_index, std::string>;
  struct Slot {
    uint64_t inputs = 0;
    std::shared_ptr<const void> form;
  };
  mutable aside::Mutex mu_;
  absl::flat_hash_map<Key, Slot> forms_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_PUBLISHED_FORMS_H_
