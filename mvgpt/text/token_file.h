#pragma once
// Token files in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count),
// then the tokens as uint16. Read through a read-only memory map, so opening costs nothing.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mvgpt::text {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Writes atomically (temporary file, fsync, rename). Throws std::invalid_argument when an id does
// not fit in uint16 (> 65535) or there are more tokens than the int32 count can hold.
void write_token_file(const std::string& path, std::span<const uint32_t> tokens);

class TokenFile {
 public:
  // Maps and validates the file; std::runtime_error naming the path when it is shorter than the
  // header, not an llm.c token file (magic), of another version, or truncated (count vs size).
  explicit TokenFile(std::string path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const uint16_t* data() const { return tokens_; }
  std::span<const uint16_t> tokens() const { return {tokens_, count_}; }
  // Unchecked, like std::vector's.
  uint16_t operator[](size_t i) const { return tokens_[i]; }
  const std::string& path() const { return path_; }

  // Largest id in the file (scanned once, then cached), -1 when empty; check it against the
  // model's vocabulary before training.
  int32_t max_token() const;

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  size_t count_ = 0;
  mutable std::atomic<int32_t> max_token_{-2};  // -2: not scanned yet (atomic: const readers may race)
};

}  // namespace mvgpt::text
