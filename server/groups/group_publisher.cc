#include "server/groups/group_publisher.h"

#include <utility>

#include "lib/thread_name.h"
#include "server/groups/group_registry.h"

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
  Post([group = std::move(group)] { group->TellListeners(); });
}

void GroupPublisher::Post(std::function<void()> task) {
  aside::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  ++posted_;
}

bool GroupPublisher::AwaitIdle(absl::Duration timeout) {
  // Idle means nothing queued and nothing running, counting what the tasks
  // themselves post (an observer that adds a group posts its announcement):
  // a target taken at the call would return between the two.
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
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    task();
    task = nullptr;  // a group's last reference may go here, outside mu_
    mu_.Lock();
    ++told_;
  }
  mu_.Unlock();
}

}  // namespace aside::server
