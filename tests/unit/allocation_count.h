// Heap allocations (operator new) made by the calling thread while `f` runs: for tests that
// hold a hot path to "no allocation per record". The unit-test binary replaces the global
// operator new to count them (allocation_count_test.cc); other threads are not counted.
#pragma once

#include <cstdint>
#include <functional>

namespace stormwatch::testing {

uint64_t AllocationsDuring(const std::function<void()>& f);
// Heap blocks released (operator delete of a non-null pointer) by the calling thread while `f`
// runs: for tests of what frees shared state.
uint64_t FreesDuring(const std::function<void()>& f);

}  // namespace stormwatch::testing
