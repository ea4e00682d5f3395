#include "agent/heap_pages.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace stormwatch {

int MallocHugetlbIn(std::string_view tunables) {
  constexpr std::string_view kName = "glibc.malloc.hugetlb=";
  int on = 0;
  while (!tunables.empty()) {  // the last setting of a name wins, as in glibc
    const size_t end = tunables.find(':');
    const std::string_view item = tunables.substr(0, end);
    if (item.substr(0, kName.size()) == kName) {
      const std::string_view value = item.substr(kName.size());
      on = value == "1" ? 1 : value == "2" ? 2 : 0;
    }
    if (end == std::string_view::npos) break;
    tunables.remove_prefix(end + 1);
  }
  return on;
}

std::string SelectedThpMode(std::string_view enabled_file) {
  const size_t open = enabled_file.find('[');
  const size_t close = enabled_file.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return "";
  return std::string(enabled_file.substr(open + 1, close - open - 1));
}

HeapPages CurrentHeapPages() {
  HeapPages pages;
  if (const char* tunables = std::getenv("GLIBC_TUNABLES")) {
    pages.malloc_hugetlb = MallocHugetlbIn(tunables);
  }
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string text((std::istreambuf_iterator<char>(enabled)), std::istreambuf_iterator<char>());
  pages.thp_mode = SelectedThpMode(text);
  return pages;
}

std::string DescribeHeapPages(const HeapPages& p) {
  const std::string mode = p.thp_mode.empty() ? "unknown" : p.thp_mode;
  if (p.huge()) {
    return "heap on transparent huge pages (THP mode " + mode +
           (p.malloc_hugetlb ? ", glibc.malloc.hugetlb set)" : ")");
  }
  if (!p.small()) return "heap on reserved hugetlbfs pages where there are any (glibc.malloc.hugetlb=2)";
  if (p.thp_mode == "never") {
    return "heap on 4 KiB pages: transparent huge pages are off on this node (THP mode never); "
           "the request pipeline runs 10-20% slower with thousands of clients";
  }
  return "heap on 4 KiB pages (THP mode " + mode +
         "): set GLIBC_TUNABLES=glibc.malloc.hugetlb=1 in the agent's environment (the Helm chart "
         "does); the request pipeline runs 10-20% slower with thousands of clients without it";
}

}  // namespace stormwatch
