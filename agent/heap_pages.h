// Whether the agent's heap sits on transparent huge pages, and how to say so at start.
//
// The pipeline's state (10,000 clients' identities and detector entries, 100,000 objects) is read
// at random, a few cache lines per table per request: on 4 KiB pages most of those reads also
// miss the TLB. glibc puts its heap on huge pages when GLIBC_TUNABLES holds
// glibc.malloc.hugetlb=1 (it then asks for them with madvise, which the kernel's default THP mode
// "madvise" honours): 10-20% more requests per second through the pipeline with 10,000 clients
// (docs/benchmark.md). The tunable is read when the process starts, so it is set by whoever starts
// the agent (the Helm chart does); the agent only reports it.
#pragma once

#include <string>
#include <string_view>

namespace stormwatch {

struct HeapPages {
  // glibc.malloc.hugetlb: 0 (default), 1 (malloc asks for transparent huge pages with madvise),
  // 2 (malloc maps reserved hugetlbfs pages, falling back to 4 KiB ones when none are left).
  int malloc_hugetlb = 0;
  std::string thp_mode;  // always, madvise or never; "" when unknown
  // Whether the heap gets transparent huge pages: the kernel gives them to every large mapping
  // (always), or to those malloc asks for (madvise, with the tunable at 1).
  bool huge() const { return thp_mode == "always" || (thp_mode == "madvise" && malloc_hugetlb == 1); }
  // On 4 KiB pages with no huge page of any kind asked for: what the agent warns about at start.
  bool small() const { return !huge() && malloc_hugetlb != 2; }
};

// glibc.malloc.hugetlb's value in a GLIBC_TUNABLES string ("name=value:name=value"): 1 or 2, else 0
// (absent or not a value glibc takes).
int MallocHugetlbIn(std::string_view glibc_tunables);
// The selected mode of /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never"),
// "" when the text shows none.
std::string SelectedThpMode(std::string_view enabled_file);

// This process's: GLIBC_TUNABLES and the kernel's THP mode.
HeapPages CurrentHeapPages();

// One line for the agent's start: what the heap is on, and when it is not on huge pages, why and
// what to set.
std::string DescribeHeapPages(const HeapPages& pages);

}  // namespace stormwatch
