// A reference-counted pointer for state confined to one thread: the pipeline's (the identity
// cache, records, the detectors' tables). Its count is a plain integer. A std::shared_ptr's
// is atomic: each copy and each release was a locked instruction, several per request, often
// on a cache line out of cache (the identity of one of 10,000 clients, the writer of one of
// 100,000 objects), and a locked instruction also holds back every load after it. What leaves
// the pipeline's thread (alert evidence, /debug snapshots, metric labels) is copied out by
// value, never shared through one of these.
#pragma once

#include <cstdint>

namespace stormwatch {

// `Node` holds `uint32_t refs` (1 when made) and frees itself with `static void Destroy(Node*)`.
template <typename Node>
class CountedPtr {
 public:
  CountedPtr() = default;
  // Takes over a node just made (its one reference).
  explicit CountedPtr(Node* made) : node_(made) {}

  CountedPtr(const CountedPtr& other) noexcept : node_(other.node_) {
    if (node_) ++node_->refs;
  }
  CountedPtr(CountedPtr&& other) noexcept : node_(other.node_) { other.node_ = nullptr; }
  CountedPtr& operator=(const CountedPtr& other) noexcept {
    if (other.node_) ++other.node_->refs;  // first: a self-assignment must not free the node
    Release();
    node_ = other.node_;
    return *this;
  }
  CountedPtr& operator=(CountedPtr&& other) noexcept {
    if (this != &other) {
      Release();
      node_ = other.node_;
      other.node_ = nullptr;
    }
    return *this;
  }
  ~CountedPtr() { Release(); }

  Node* get() const { return node_; }
  explicit operator bool() const { return node_ != nullptr; }
  // The same node (not equal contents).
  friend bool operator==(const CountedPtr& a, const CountedPtr& b) { return a.node_ == b.node_; }

 private:
  void Release() noexcept {
    if (node_ && --node_->refs == 0) Node::Destroy(node_);
  }

  Node* node_ = nullptr;
};

}  // namespace stormwatch
