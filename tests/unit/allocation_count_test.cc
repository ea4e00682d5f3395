// The allocation counter of the unit-test binary (allocation_count.h): a replaced global
// operator new that counts, on the thread that asked, while AllocationsDuring runs (and operator
// delete, while FreesDuring runs).
#include "tests/unit/allocation_count.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {
thread_local bool t_counting = false;
thread_local uint64_t t_allocations = 0;
thread_local bool t_counting_frees = false;
thread_local uint64_t t_frees = 0;

void Free(void* p) {
  if (t_counting_frees && p) ++t_frees;
  std::free(p);
}
}  // namespace

#pragma GCC diagnostic push
// gcc pairs the free() below with the new expressions it inlines into this file's tests.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  if (t_counting) ++t_allocations;
  void* p = nullptr;
  if (posix_memalign(&p, std::max(sizeof(void*), static_cast<size_t>(align)), size ? size : 1) != 0) {
    throw std::bad_alloc();
  }
  return p;
}
// Every other replaceable form, so that each allocation and its release pair up (a sanitizer
// checks that memory from operator new is not given to free, and the ones below use free).
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new[](std::size_t size, std::align_val_t align) { return ::operator new(size, align); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return ::operator new(size, std::nothrow);
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(size, align);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return ::operator new(size, align, std::nothrow);
}
void operator delete(void* p) noexcept { Free(p); }
void operator delete(void* p, std::size_t) noexcept { Free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p) noexcept { Free(p); }
void operator delete[](void* p, std::size_t) noexcept { Free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Free(p); }
#pragma GCC diagnostic pop

namespace stormwatch::testing {

namespace {

// What `count` grew by while `f` ran with `counting` set.
uint64_t CountDuring(bool& counting, const uint64_t& count, const std::function<void()>& f) {
  const uint64_t before = count;
  counting = true;
  f();
  counting = false;
  return count - before;
}

}  // namespace

uint64_t AllocationsDuring(const std::function<void()>& f) {
  return CountDuring(t_counting, t_allocations, f);
}

uint64_t FreesDuring(const std::function<void()>& f) { return CountDuring(t_counting_frees, t_frees, f); }

namespace {

TEST(AllocationCount, CountsTheCallingThreadsAllocationsOnly) {
  std::vector<std::unique_ptr<int>> kept;
  EXPECT_EQ(AllocationsDuring([&] {
              for (int i = 0; i < 3; ++i) kept.push_back(std::make_unique<int>(i));
            }),
            3u + 3u);  // three ints; the vector's storage grows 1 -> 2 -> 4
  std::string small;
  EXPECT_EQ(AllocationsDuring([&] { small = "fits inline"; }), 0u);
  EXPECT_EQ(AllocationsDuring([] {}), 0u);
  // The nothrow form (std::stable_sort's buffer) is counted too, and freed by delete.
  std::vector<int> v(1000, 1);
  EXPECT_GE(AllocationsDuring([&] { std::stable_sort(v.begin(), v.end()); }), 1u);
}

TEST(AllocationCount, CountsTheCallingThreadsFrees) {
  auto one = std::make_unique<int>(1);
  std::vector<int> three(3);
  EXPECT_EQ(FreesDuring([&] {
              one.reset();
              std::vector<int>().swap(three);
            }),
            2u);
  EXPECT_EQ(FreesDuring([] { std::string small = "fits inline"; }), 0u);
}

}  // namespace
}  // namespace stormwatch::testing
