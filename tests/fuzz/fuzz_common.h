// Helpers of the fuzz targets: a cursor over libFuzzer's input that splits it into pieces.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace stormwatch::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  size_t left() const { return size_; }
  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  uint16_t U16() { return uint16_t(Byte() | (Byte() << 8)); }
  // Up to `n` bytes.
  std::string_view Bytes(size_t n) {
    n = n < size_ ? n : size_;
    std::string_view out(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return out;
  }
  // A piece of at most `max` bytes whose length is the next 2 bytes.
  std::string_view Piece(size_t max = 0xffff) { return Bytes(U16() % (max + 1)); }
  // Up to the next "\n--\n" separator (or the end): text inputs made of several strings.
  std::string_view Field() {
    std::string_view rest(reinterpret_cast<const char*>(data_), size_);
    size_t at = rest.find("\n--\n");
    std::string_view out = rest.substr(0, at);
    size_t used = at == std::string_view::npos ? size_ : at + 4;
    data_ += used;
    size_ -= used;
    return out;
  }
  std::string_view Rest() { return Bytes(size_); }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace stormwatch::fuzz
