#include <mvgpt/text/token_file.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include <mvgpt/util/atomic_file.h>

namespace mvgpt::text {

void write_token_file(const std::string& path, std::span<const uint32_t> tokens) {
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument("write_token_file: " + path + ": " + std::to_string(tokens.size()) +
                                " tokens do not fit the int32 count of the header");
  }
  std::array<int32_t, kTokenFileHeaderInts> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = int32_t(tokens.size());

  // Convert in blocks: checks every id and keeps memory flat for huge streams.
  constexpr size_t kBlock = 1 << 16;
  std::vector<uint16_t> block;
  block.reserve(std::min(tokens.size(), kBlock));
  util::AtomicFileWriter out(path);
  out.write(header.data(), sizeof(header));
  for (size_t start = 0; start < tokens.size(); start += kBlock) {
    const size_t end = std::min(tokens.size(), start + kBlock);
    block.clear();
    for (size_t i = start; i < end; ++i) {
      if (tokens[i] > 0xFFFF) {
        throw std::invalid_argument("write_token_file: " + path + ": token " + std::to_string(i) + " is " +
                                    std::to_string(tokens[i]) + ", more than a uint16 holds (65535)");
      }
      block.push_back(uint16_t(tokens[i]));
    }
    out.write(block.data(), block.size() * sizeof(uint16_t));
  }
  out.commit();
}

namespace {

std::runtime_error token_file_error(const std::string& path, const std::string& what) {
  return std::runtime_error("TokenFile: " + path + ": " + what);
}

}  // namespace

TokenFile::TokenFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw token_file_error(path_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw token_file_error(path_, std::string("cannot stat: ") + std::strerror(err));
  }
  const size_t file_bytes = size_t(st.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    throw token_file_error(path_, "file is " + std::to_string(file_bytes) + " bytes, shorter than the " +
                                      std::to_string(kTokenFileHeaderBytes) + "-byte header");
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) throw token_file_error(path_, std::string("cannot mmap: ") + std::strerror(map_errno));
  map_ = map;
  map_bytes_ = file_bytes;

  // The header is read through memcpy: the map is page-aligned, but this keeps it obviously legal.
  std::array<int32_t, 3> head{};
  std::memcpy(head.data(), map_, sizeof(head));
  try {
    if (head[0] != kTokenFileMagic) {
      throw token_file_error(path_, "not an llm.c token file (magic " + std::to_string(head[0]) + ", expected " +
                                        std::to_string(kTokenFileMagic) + ")");
    }
    if (head[1] != kTokenFileVersion) {
      throw token_file_error(path_, "unsupported version " + std::to_string(head[1]) + " (expected " +
                                        std::to_string(kTokenFileVersion) + ": uint16 tokens)");
    }
    if (head[2] < 0) throw token_file_error(path_, "negative token count " + std::to_string(head[2]));
    const size_t expected = kTokenFileHeaderBytes + size_t(head[2]) * sizeof(uint16_t);
    if (file_bytes != expected) {
      throw token_file_error(path_, "header says " + std::to_string(head[2]) + " tokens (" +
                                        std::to_string(expected) + " bytes) but the file is " +
                                        std::to_string(file_bytes) + " bytes" +
                                        (file_bytes < expected ? " (truncated)" : " (trailing bytes)"));
    }
  } catch (...) {
    release();
    throw;
  }
  count_ = size_t(head[2]);
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kTokenFileHeaderBytes);
  // Training reads the whole file in order.
  if (map_bytes_ > 0) ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
}

TokenFile::~TokenFile() { release(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      max_token_(other.max_token_.exchange(-2)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    max_token_.store(other.max_token_.exchange(-2));
  }
  return *this;
}

void TokenFile::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  count_ = 0;
}

int32_t TokenFile::max_token() const {
  int32_t cached = max_token_.load(std::memory_order_relaxed);
  if (cached != -2) return cached;
  // A plain max loop over contiguous uint16: the compiler vectorizes it.
  uint16_t best = 0;
  for (size_t i = 0; i < count_; ++i) best = std::max(best, tokens_[i]);
  cached = count_ == 0 ? -1 : int32_t(best);
  max_token_.store(cached, std::memory_order_relaxed);
  return cached;
}

}  // namespace mvgpt::text
