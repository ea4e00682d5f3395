// What the agent says at start about its heap's pages: the glibc tunable read as glibc reads it,
// the kernel's THP mode, and the advice when the heap is on 4 KiB pages.
#include "agent/heap_pages.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace stormwatch {
namespace {

TEST(HeapPages, ReadsTheMallocTunableAsGlibcDoes) {
  EXPECT_EQ(MallocHugetlbIn(""), 0);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=1"), 1);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=2"), 2);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1:glibc.rtld.x=3"), 1);
  // The last setting of a name wins; a value glibc does not take leaves the default.
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0"), 0);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=0:glibc.malloc.hugetlb=1"), 1);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=3"), 0);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlb=11"), 0);
  // Other names that merely contain it.
  EXPECT_EQ(MallocHugetlbIn("xglibc.malloc.hugetlb=1"), 0);
  EXPECT_EQ(MallocHugetlbIn("glibc.malloc.hugetlbx=1"), 0);
  EXPECT_EQ(MallocHugetlbIn(":glibc.malloc.hugetlb=1:"), 1);
}

TEST(HeapPages, ReadsTheSelectedThpMode) {
  EXPECT_EQ(SelectedThpMode("always [madvise] never\n"), "madvise");
  EXPECT_EQ(SelectedThpMode("[always] madvise never\n"), "always");
  EXPECT_EQ(SelectedThpMode("always madvise [never]\n"), "never");
  EXPECT_EQ(SelectedThpMode(""), "");  // no file (no THP in the kernel)
  EXPECT_EQ(SelectedThpMode("always madvise never"), "");
}

TEST(HeapPages, HugeOnlyWhereTheKernelGivesThem) {
  EXPECT_TRUE((HeapPages{1, "madvise"}).huge());
  EXPECT_FALSE((HeapPages{0, "madvise"}).huge());
  EXPECT_TRUE((HeapPages{0, "always"}).huge());
  EXPECT_FALSE((HeapPages{1, "never"}).huge());
  EXPECT_FALSE((HeapPages{1, ""}).huge());
  EXPECT_FALSE((HeapPages{2, "madvise"}).huge());  // hugetlbfs pages, not transparent ones
  // What the agent warns about: small pages with nothing asked for.
  EXPECT_TRUE((HeapPages{0, "madvise"}).small());
  EXPECT_TRUE((HeapPages{1, "never"}).small());
  EXPECT_FALSE((HeapPages{1, "madvise"}).small());
  EXPECT_FALSE((HeapPages{2, "never"}).small());
}

TEST(HeapPages, SaysWhatToSetWhenTheHeapIsOnSmallPages) {
  const std::string advised = DescribeHeapPages({1, "madvise"});
  EXPECT_NE(advised.find("heap on transparent huge pages"), std::string::npos) << advised;
  EXPECT_NE(advised.find("glibc.malloc.hugetlb set"), std::string::npos) << advised;
  EXPECT_EQ(DescribeHeapPages({0, "always"}), "heap on transparent huge pages (THP mode always)");

  const std::string small = DescribeHeapPages({0, "madvise"});
  EXPECT_NE(small.find("heap on 4 KiB pages (THP mode madvise)"), std::string::npos) << small;
  EXPECT_NE(small.find("set GLIBC_TUNABLES=glibc.malloc.hugetlb=1"), std::string::npos) << small;

  const std::string off = DescribeHeapPages({1, "never"});
  EXPECT_NE(off.find("transparent huge pages are off on this node"), std::string::npos) << off;
  EXPECT_EQ(off.find("GLIBC_TUNABLES"), std::string::npos) << off;  // setting it would not help

  EXPECT_NE(DescribeHeapPages({0, ""}).find("THP mode unknown"), std::string::npos);
  EXPECT_NE(DescribeHeapPages({2, "never"}).find("hugetlbfs"), std::string::npos);
}

// The process's own environment and this kernel's mode.
TEST(HeapPages, ReadsThisProcess) {
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string text((std::istreambuf_iterator<char>(enabled)), std::istreambuf_iterator<char>());

  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1), 0);
  HeapPages pages = CurrentHeapPages();
  EXPECT_EQ(pages.malloc_hugetlb, 1);
  EXPECT_EQ(pages.thp_mode, SelectedThpMode(text));
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
  EXPECT_EQ(CurrentHeapPages().malloc_hugetlb, 0);

  if (saved) setenv("GLIBC_TUNABLES", saved->c_str(), 1);
}

}  // namespace
}  // namespace stormwatch
