#pragma once
// XXH64 (Yann Collet's xxHash, 64-bit): a fast non-cryptographic checksum, here to catch flipped
// bytes and edits in saved files. It is not a defence against someone who forges a file on purpose.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mvgpt::util {

// Streaming XXH64: update() any number of times, then digest() (which does not change the state).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t acc_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};
// Reads the whole file once; throws std::runtime_error naming the path when it cannot.
FileDigest digest_file(const std::string& path);

// 16 lower-case hex digits, and back (false for anything else).
std::string to_hex(uint64_t v);
bool from_hex(const std::string& text, uint64_t& v);

}  // namespace mvgpt::util
