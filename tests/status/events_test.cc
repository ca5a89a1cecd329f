// The event timeline's publication events: a registry whose listeners are
// told on the publishing thread (no publisher), so every event is recorded
// by the time the write returns.
#include "server/status/events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "server/groups/group_registry.h"
#include "tests/testing/group_specs.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::ElementsAre;

using ::aside::testing::PlainGroup;

class PublicationEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
  }
  // "kind group backend" of each event recorded, oldest first.
  std::vector<std::string> Kinds() const {
    std::vector<std::string> out;
    for (const Event& e : log_.List()) {
      out.push_back(
          absl::StrCat(EventKindName(e.kind), " ", e.group, " ", e.backend));
    }
    return out;
  }
  FakeClock clock_;
  EventLog log_{&clock_};
  std::unique_ptr<GroupRegistry> registry_;
};

TEST_F(PublicationEventsTest, GroupsBeforeAndAfterAreFollowedToTheirRemoval) {
  ASSERT_OK(registry_->Add(PlainGroup("web", {"10.0.0.1:80"})));
  auto events = std::make_unique<PublicationEvents>(registry_.get(), &log_);
  // A group there before is taken as it is: no event until it changes.
  EXPECT_TRUE(log_.List().empty());
  ASSERT_OK(
      registry_->Update(registry_->Find("web"),
                        PlainGroup("web", {"10.0.0.1:80", "10.0.0.2:80"})));
  ASSERT_OK(registry_->Add(PlainGroup("api", {"10.0.0.3:80"})));
  const uint64_t first = registry_->Find("api")->table()->generation();
  GroupSpec drained = PlainGroup("api", {"10.0.0.3:80"});
  drained.backends[0].drained = true;
  ASSERT_OK(registry_->Update(registry_->Find("api"), drained));
  ASSERT_OK_AND_ASSIGN(const uint64_t removal, registry_->Remove("api"));
  EXPECT_THAT(Kinds(),
              ElementsAre("generation web ", "backend_added web 10.0.0.2:80",
                          // Its first table is the addition, not a
                          // generation with a backend added.
                          "group_added api ", "generation api ",
                          "drained api 10.0.0.3:80", "group_removed api "));
  const std::vector<Event> list = log_.List();
  EXPECT_EQ(list[2].cause, absl::StrCat("generation ", first));
  EXPECT_EQ(list[5].cause, absl::StrCat("generation ", removal));

  // Once destroyed it records nothing more.
  events.reset();
  ASSERT_OK(registry_->Add(PlainGroup("later", {"10.0.0.4:80"})));
  EXPECT_EQ(log_.List().size(), 6u);
}

}  // namespace
}  // namespace aside::server
