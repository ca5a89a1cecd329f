#include "server/groups/group_publisher.h"

#include <utility>

#include "lib/thread_name.h"
#include "server/groups/group.h"

namespace aside::server {

GroupPublisher::GroupPublisher() {
  thread_ = std::thread([this] {
    NameThisThread("aside-publish");
    Run();
  });
}

GroupPublisher::~GroupPublisher() {
  {
    aside::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void GroupPublisher::Post(std::shared_ptr<Group> group) {
  aside::MutexLock lock(&mu_);
  queue_.push_back(std::move(group));
  ++posted_;
}

bool GroupPublisher::AwaitIdle(absl::Duration timeout) {
  // Idle means nothing queued and no group being told, counting what the
  // listeners themselves cause to be posted (one that adds a group): a
  // target taken at the call would return between the two.
  aside::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      [&] {
        mu_.AssertHeld();
        return told_ == posted_;
      },
      timeout);
}

void GroupPublisher::Run() {
  mu_.Lock();
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !queue_.empty();
    };
    mu_.Await(aside::Cond(&ready));
    if (queue_.empty()) {
      break;  // stopped, and everything posted was told
    }
    std::shared_ptr<Group> group = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    group->TellListeners();
    group = nullptr;  // its last reference may go here, outside mu_
    mu_.Lock();
    ++told_;
  }
  mu_.Unlock();
}

}  // namespace aside::server
