// What every streaming service shares (Watch, grpclb, xDS ADS and LRS, the
// fleet's LoadView): the set of its open streams and a ticker.
//
// StreamSet<Stream> holds the open streams: a stream adds itself when it
// starts and removes itself in OnDone; once the service shuts down, Add
// refuses (the stream then finishes itself, UNAVAILABLE) and every open
// stream is told (Stream::Shutdown()). ForEach visits them under the set's
// lock. Lock order: the set's lock is taken before a stream's own
// (Shutdown and ForEach call into streams with it held), so a stream never
// calls the set while holding its own lock.
//
// Ticker (event_loop.h) runs a service's periodic work.
//
// Thread-safe; each costs one mutex. O(streams) per Shutdown and ForEach.
#ifndef ASIDE_SERVER_BASE_STREAM_SET_H_
#define ASIDE_SERVER_BASE_STREAM_SET_H_

#include <set>

#include "absl/base/thread_annotations.h"
#include "lib/sync.h"
#include "server/base/event_loop.h"

namespace aside::server {

template <typename Stream>
class StreamSet {
 public:
  // Adds `s`; false (and not added) once Shutdown has begun.
  bool Add(Stream* s) {
    aside::MutexLock lock(&mu_);
    if (shutting_down_) {
      return false;
    }
    streams_.insert(s);
    return true;
  }
  // Removes `s` (a stream not in the set is ignored); how many remain.
  size_t Remove(Stream* s) {
    aside::MutexLock lock(&mu_);
    streams_.erase(s);
    return streams_.size();
  }
  // Refuses new streams and calls Shutdown() on each open one. Idempotent.
  void Shutdown() {
    aside::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (Stream* s : streams_) {
      s->Shutdown();
    }
  }
  size_t size() const {
    aside::MutexLock lock(&mu_);
    return streams_.size();
  }
  bool shutting_down() const {
    aside::MutexLock lock(&mu_);
    return shutting_down_;
  }
  // Calls fn(Stream*) on each open stream, with the set's lock held.
  template <typename Fn>
  void ForEach(Fn fn) const {
    aside::MutexLock lock(&mu_);
    for (Stream* s : streams_) {
      fn(s);
    }
  }
  // Calls fn() with the set's lock held: serialised with ForEach's calls,
  // and every stream in the set stays alive meanwhile.
  template <typename Fn>
  void Locked(Fn fn) const {
    aside::MutexLock lock(&mu_);
    fn();
  }

 private:
  mutable aside::Mutex mu_;
  std::set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_BASE_STREAM_SET_H_
