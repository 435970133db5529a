#include <mvgpt/nn/safetensors.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include <mvgpt/backends/backend.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/json.h>

namespace mvgpt::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian data");

namespace {

using json = nlohmann::ordered_json;

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
// must not make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("safetensors: " + path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  fail(path, "tensor '" + name + "': " + what);
}

std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads exactly n bytes at `offset`, or throws.
void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(path, "read failed: " + errno_text());
    }
    if (got == 0) fail(path, "file is truncated (unexpected end of file)");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

// A read-only view of a file mapped copy-on-write; unmapped when the last tensor using it dies.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// Bytes of `t` in row-major order on the host: its own memory when it is a contiguous CPU tensor,
// else a packed copy held in `scratch`.
const char* host_bytes(const Tensor& t, Tensor& scratch) {
  Tensor host = t;
  if (!t.device().is_cpu()) {
    // Straight to the backend: pack on the device if needed, then one device-to-host copy.
    Backend& backend = backend_for(t.device());
    Tensor packed = t;
    if (!t.is_contiguous()) {
      packed = Tensor::empty(t.shape(), t.dtype(), t.device());
      backend.copy(t, packed);
    }
    host = Tensor::empty(t.shape(), t.dtype());
    backend.copy_between_devices(packed, host);
    backend.synchronize();
  }
  if (host.is_contiguous()) {
    scratch = host;  // keeps a device-to-host copy alive while the caller writes it
    return static_cast<const char*>(scratch.raw_data());
  }
  // Strided CPU tensor: pack it element by element with an odometer over the shape.
  scratch = Tensor::empty(host.shape(), host.dtype());
  const size_t item = dtype_size(host.dtype());
  const char* base = static_cast<const char*>(host.storage()->data());
  char* out = static_cast<char*>(scratch.raw_data());
  const Shape& shape = host.shape();
  const Strides& strides = host.strides();
  const int nd = shape.size();
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t off = host.offset();
  for (int64_t i = 0, n = host.numel(); i < n; ++i) {
    std::memcpy(out + size_t(i) * item, base + off * int64_t(item), item);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

}  // namespace

std::string_view dtype_to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

bool dtype_from_string(std::string_view name, DType& dtype) {
  static const std::pair<std::string_view, DType> table[] = {{"F32", DType::f32}, {"F64", DType::f64},
                                                             {"BF16", DType::bf16}, {"I32", DType::i32},
                                                             {"I64", DType::i64}, {"BOOL", DType::boolean}};
  for (const auto& [n, d] : table)
    if (n == name) {
      dtype = d;
      return true;
    }
  return false;
}

Header parse_header(std::string_view header_json, uint64_t data_size, const std::string& path) {
  json root;
  try {
    root = util::parse_json_strict<json>(header_json);  // a tensor named twice is refused, not overwritten
  } catch (const util::JsonError& e) {
    fail(path, std::string("header: ") + e.what());
  }
  if (!root.is_object()) fail(path, "header is not a JSON object");

  Header header;
  header.data_size = data_size;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ value of '" + m.key() + "' is not a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail_tensor(path, name, "header entry is not an object");
    TensorInfo info;
    info.name = name;

    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) fail_tensor(path, name, "missing or non-string \"dtype\"");
    info.f16 = dt->get<std::string>() == "F16";
    if (info.f16) info.dtype = DType::f32;  // converted on load
    else if (!dtype_from_string(dt->get<std::string>(), info.dtype))
      fail_tensor(path, name,
                  "unsupported dtype '" + dt->get<std::string>() + "' (supported: F32, F64, F16, BF16, I32, I64, BOOL)");
    const uint64_t file_item = info.f16 ? 2 : uint64_t(dtype_size(info.dtype));

    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) fail_tensor(path, name, "missing or non-array \"shape\"");
    if (sh->size() > size_t(kMaxDims))
      fail_tensor(path, name, "shape has " + std::to_string(sh->size()) + " dims, at most " + std::to_string(kMaxDims) +
                                  " are supported");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
        fail_tensor(path, name, "shape " + sh->dump() + " holds a value that is not a non-negative integer");
      uint64_t v = d.get<uint64_t>();
      info.shape.push_back(int64_t(v));
      overflow |= __builtin_mul_overflow(numel, v, &numel);
    }

    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail_tensor(path, name, "\"data_offsets\" must be [begin, end] with non-negative integers");
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.end < info.begin)
      fail_tensor(path, name, "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                                  "] end before they begin");
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, file_item, &nbytes);
    if (overflow || nbytes != info.end - info.begin)
      fail_tensor(path, name, "shape " + to_string(info.shape) + " of " +
                                  (info.f16 ? std::string("F16") : std::string(dtype_to_string(info.dtype))) +
                                  " needs " + (overflow ? std::string("more than 2^64") : std::to_string(nbytes)) +
                                  " bytes, but data_offsets [" + std::to_string(info.begin) + ", " +
                                  std::to_string(info.end) + "] hold " + std::to_string(info.end - info.begin));
    header.tensors.push_back(std::move(info));
  }

  // The tensors must tile the data section exactly: sorted by begin, each starts where the last ended.
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : header.tensors) {
    if (t.end > data_size)
      fail_tensor(path, t.name, "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                    "] run past the data section of " + std::to_string(data_size) +
                                    " bytes (file truncated?)");
    if (t.begin < expected)
      fail_tensor(path, t.name, "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                    "] overlap tensor '" + previous->name + "' ending at " + std::to_string(expected));
    if (t.begin > expected)
      fail_tensor(path, t.name, "data_offsets begin at " + std::to_string(t.begin) + " but the previous tensor" +
                                    (previous ? " '" + previous->name + "'" : std::string()) + " ends at " +
                                    std::to_string(expected) + " (a gap in the data section)");
    expected = t.end;
    previous = &t;
  }
  if (expected != data_size)
    fail(path, "tensors cover " + std::to_string(expected) + " bytes of a data section of " + std::to_string(data_size) +
                   " bytes (trailing bytes)");
  return header;
}

namespace {

// Reads the length prefix and the JSON text; checks sizes before allocating anything.
Header read_header_fd(int fd, uint64_t file_size, const std::string& path) {
  if (file_size < 8) fail(path, "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  unsigned char prefix[8];
  pread_all(fd, prefix, 8, 0, path);
  uint64_t n = read_u64_le(prefix);
  if (n > file_size - 8)
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) +
                   " bytes)");
  if (n > kMaxHeaderBytes) fail(path, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  std::string text(size_t(n), '\0');
  pread_all(fd, text.data(), size_t(n), 8, path);
  if (text.empty() || text[0] != '{') fail(path, "header does not start with '{'");
  Header header = parse_header(text, file_size - 8 - n, path);
  header.data_start = 8 + n;
  return header;
}

uint64_t file_size_of(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, "stat failed: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  return uint64_t(st.st_size);
}

}  // namespace

Header read_header(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) fail(path, "cannot open: " + errno_text());
  return read_header_fd(fd.fd, file_size_of(fd.fd, path), path);
}

bool File::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& File::at(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  fail(path, "no tensor named '" + std::string(name) + "' (the file holds " + std::to_string(tensors.size()) +
                 " tensors)");
}

File load(const std::string& path, const LoadOptions& options) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) fail(path, "cannot open: " + errno_text());
  const uint64_t file_size = file_size_of(fd.fd, path);
  Header header = read_header_fd(fd.fd, file_size, path);

  File file;
  file.path = path;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.tensors.size());

  std::shared_ptr<Mapping> mapping;
  if (options.mmap && header.data_size > 0) {
    void* addr = ::mmap(nullptr, size_t(file_size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.fd, 0);
    if (addr == MAP_FAILED) fail(path, "mmap failed: " + errno_text());
    mapping = std::make_shared<Mapping>();
    mapping->addr = addr;
    mapping->size = size_t(file_size);
  }

  for (const TensorInfo& info : header.tensors) {
    const uint64_t start = header.data_start + info.begin;
    const size_t nbytes = size_t(info.end - info.begin);
    const size_t item = dtype_size(info.dtype);
    Tensor t;
    if (info.f16) {  // half -> float32: a fresh tensor whatever the mapping
      std::vector<uint16_t> halves(nbytes / 2);
      if (nbytes > 0) {
        if (mapping) std::memcpy(halves.data(), static_cast<char*>(mapping->addr) + start, nbytes);
        else pread_all(fd.fd, halves.data(), nbytes, start, path);
      }
      t = Tensor::empty(info.shape, DType::f32);
      float* out = t.numel() > 0 ? t.data<float>() : nullptr;
      for (size_t i = 0; i < halves.size(); ++i) out[i] = half_to_float(halves[i]);
    } else if (mapping && nbytes > 0 && start % item == 0) {
      char* p = static_cast<char*>(mapping->addr) + start;
      // The release callback only holds the mapping; it unmaps when the last storage goes.
      auto storage = std::make_shared<Storage>(p, nbytes, Device::cpu(), [keep = mapping] {});
      t = Tensor::from_storage(std::move(storage), info.shape, contiguous_strides(info.shape), 0, info.dtype);
    } else {
      t = Tensor::empty(info.shape, info.dtype);
      if (nbytes > 0) {
        if (mapping) std::memcpy(t.raw_data(), static_cast<char*>(mapping->addr) + start, nbytes);
        else pread_all(fd.fd, t.raw_data(), nbytes, start, path);
      }
    }
    t.set_name(info.name);
    file.tensors.emplace_back(info.name, std::move(t));
  }
  return file;
}

void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata, const SaveOptions& options) {
  auto as_f16 = [&](const Tensor& t) { return options.f16 && (t.dtype() == DType::f32 || t.dtype() == DType::f64); };
  // Check everything and build the header before creating any file.
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) fail(path, "cannot save a tensor with an empty name");
    if (name == "__metadata__") fail(path, "'__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(name).second) fail_tensor(path, name, "name given twice");
    if (!t.defined()) fail_tensor(path, name, "tensor is undefined");
    json shape = json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    const uint64_t nbytes = as_f16(t) ? uint64_t(t.numel()) * 2 : t.nbytes();
    header[name] = json{{"dtype", as_f16(t) ? std::string("F16") : std::string(dtype_to_string(t.dtype()))},
                        {"shape", std::move(shape)},
                        {"data_offsets", json::array({offset, offset + nbytes})}};
    offset += nbytes;
  }
  std::string text = header.dump();  // compact, like serde_json
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  util::AtomicFileWriter out(path);
  out.write(prefix, 8);
  out.write(text);
  for (const auto& [name, t] : tensors) {
    Tensor scratch;
    const char* bytes = host_bytes(t, scratch);
    if (!as_f16(t)) {
      out.write(bytes, t.nbytes());
      continue;
    }
    std::vector<uint16_t> halves(size_t(t.numel()));
    for (size_t i = 0; i < halves.size(); ++i) {
      const double v = t.dtype() == DType::f64 ? reinterpret_cast<const double*>(bytes)[i]
                                                 : double(reinterpret_cast<const float*>(bytes)[i]);
      halves[i] = float_to_half(float(v));
    }
    out.write(halves.data(), halves.size() * 2);
  }
  out.commit();
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0);  // infinity, or a quiet NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {  // subnormal: mant * 2^-24, normal in float
    int e = -1;
    uint32_t m = mant;
    do {
      m <<= 1;
      ++e;
    } while (!(m & 0x400u));
    bits = sign | uint32_t(112 - e) << 23 | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));  // inf, NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: infinity
  if (abs >= 0x38800000u) {  // a normal half: drop 13 mantissa bits, nearest even
    const uint32_t rebased = abs - (uint32_t(112) << 23);
    const uint32_t round = 0xfffu + ((rebased >> 13) & 1u);
    return uint16_t(sign | ((rebased + round) >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal (2^-25): zero
  // A subnormal half: the value in units of 2^-24, nearest even.
  const uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // m * 2^(e - 150) / 2^-24 = m >> (126 - e)
  uint32_t q = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1), half_ulp = 1u << (shift - 1);
  if (rest > half_ulp || (rest == half_ulp && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

int64_t first_non_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return -1;
  Tensor host = t.device().is_cpu() ? mvgpt::contiguous(t) : mvgpt::contiguous(mvgpt::to(t, Device::cpu()));
  const int64_t n = host.numel();
  // On the bits: an exponent of all ones is an infinity or a NaN, whatever the payload.
  auto scan = [n](const auto* p, auto mask) -> int64_t {
    for (int64_t i = 0; i < n; ++i)
      if ((p[i] & mask) == mask) return i;
    return -1;
  };
  switch (host.dtype()) {
    case DType::f32: return scan(static_cast<const uint32_t*>(host.raw_data()), uint32_t(0x7f800000u));
    case DType::f64: return scan(static_cast<const uint64_t*>(host.raw_data()), uint64_t(0x7ff0000000000000ull));
    case DType::bf16: return scan(static_cast<const uint16_t*>(host.raw_data()), uint16_t(0x7f80u));
    default: return -1;
  }
}

void require_finite_float(const std::string& path, const std::string& name, const Tensor& t, const std::string& for_what,
                          const std::string& unusable) {
  if (!is_floating(t.dtype()))
    throw std::runtime_error(path + ": tensor '" + name + "' is " + std::string(dtype_to_string(t.dtype())) +
                             ", expected a float dtype " + for_what);
  if (const int64_t i = first_non_finite(t); i >= 0)
    throw std::runtime_error(path + ": tensor '" + name + "' holds a non-finite value (NaN or infinity) at element " +
                             std::to_string(i) + "; " + unusable);
}

}  // namespace mvgpt::safetensors
