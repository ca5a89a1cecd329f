// The forms edges build into a publication: once per type, variant and
// inputs, bounded in number, and once when callers race.
#include "server/groups/published_forms.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace aside::server {
namespace {

struct ListForm {
  int value = 0;
};
struct OtherForm {
  int value = 0;
};

TEST(PublishedFormsTest, AFormIsBuiltOncePerTypeVariantAndInputs) {
  PublishedForms forms;
  int builds = 0;
  auto build = [&](int value) {
    return [&builds, value] {
      ++builds;
      return std::make_shared<const ListForm>(ListForm{value});
    };
  };
  const auto a = forms.Get<ListForm>("v", 1, build(1));
  EXPECT_EQ(forms.Get<ListForm>("v", 1, build(2)), a);
  EXPECT_EQ(builds, 1);
  // Another variant, or another type under the same variant: apart.
  EXPECT_EQ(forms.Get<ListForm>("w", 1, build(3))->value, 3);
  EXPECT_EQ(forms
                .Get<OtherForm>("v", 1,
                                [&] {
                                  ++builds;
                                  return std::make_shared<const OtherForm>(
                                      OtherForm{4});
                                })
                ->value,
            4);
  EXPECT_EQ(builds, 3);
  // New inputs rebuild it, and only the newest is kept.
  EXPECT_EQ(forms.Get<ListForm>("v", 2, build(5))->value, 5);
  EXPECT_EQ(forms.Get<ListForm>("v", 2, build(6))->value, 5);
  EXPECT_EQ(forms.Get<ListForm>("v", 1, build(7))->value, 7);
  EXPECT_EQ(builds, 5);
  EXPECT_EQ(forms.size(), 3u);
}

TEST(PublishedFormsTest, PastTheCapFormsAreBuiltForTheirCallerOnly) {
  PublishedForms forms;
  for (size_t i = 0; i < PublishedForms::kMaxForms; ++i) {
    forms.Get<ListForm>(absl::StrCat(i), 0,
                        [] { return std::make_shared<const ListForm>(); });
  }
  int builds = 0;
  auto build = [&] {
    ++builds;
    return std::make_shared<const ListForm>(ListForm{builds});
  };
  EXPECT_EQ(forms.Get<ListForm>("one more", 0, build)->value, 1);
  EXPECT_EQ(forms.Get<ListForm>("one more", 0, build)->value, 2);
  EXPECT_EQ(forms.size(), PublishedForms::kMaxForms);
  // Those kept are still found.
  EXPECT_EQ(forms.Get<ListForm>("0", 0, build)->value, 0);
}

TEST(PublishedFormsTest, CallersRacingForOneFormBuildItOnce) {
  PublishedForms forms;
  std::atomic<int> builds{0};
  std::vector<std::shared_ptr<const ListForm>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      got[i] = forms.Get<ListForm>("v", 0, [&] {
        builds.fetch_add(1);
        return std::make_shared<const ListForm>();
      });
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(builds.load(), 1);
  for (const auto& g : got) {
    EXPECT_EQ(g, got[0]);
  }
}

}  // namespace
}  // namespace aside::server
