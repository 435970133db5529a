#include <mvgpt/nn/gguf.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; mvgpt reads and writes it as memory is");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr int64_t kQ8Block = 32;  // QK8_0
// The longest metadata array read: vocabularies and merge lists are under a million entries.
constexpr uint64_t kMaxArray = uint64_t(1) << 24;

// A name from the file as a message shows it: control bytes (a newline would break the one-line
// error) as '?', and at most 80 bytes.
std::string shown(const std::string& name) {
  std::string out = name.substr(0, 80);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return name.size() > 80 ? out + "..." : out;
}

bool is_integer(ValueType t) {
  return t == ValueType::u8 || t == ValueType::i8 || t == ValueType::u16 || t == ValueType::i16 || t == ValueType::u32 ||
         t == ValueType::i32 || t == ValueType::u64 || t == ValueType::i64 || t == ValueType::boolean;
}
bool is_float(ValueType t) { return t == ValueType::f32 || t == ValueType::f64; }

// Bytes of one scalar on disk (0 for strings and arrays, whose size is in the file).
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    default: return 0;
  }
}

const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= uint32_t(ValueType::f64) ? names[uint32_t(t)] : "unknown";
}

// Bytes a tensor of `numel` elements takes in the file (Q8_0: whole blocks of 32).
uint64_t tensor_bytes(TensorType type, uint64_t numel) {
  switch (type) {
    case TensorType::f32: return numel * 4;
    case TensorType::f16: case TensorType::bf16: return numel * 2;
    case TensorType::q8_0: return numel / kQ8Block * (2 + kQ8Block);
  }
  return 0;
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// ---- writing ----

struct Writer {
  std::string bytes;
  template <typename T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes += s;
  }
  void put_scalar(ValueType t, const Value& v, size_t i) {
    switch (t) {
      case ValueType::u8: put<uint8_t>(uint8_t(v.ints[i])); break;
      case ValueType::i8: put<int8_t>(int8_t(v.ints[i])); break;
      case ValueType::u16: put<uint16_t>(uint16_t(v.ints[i])); break;
      case ValueType::i16: put<int16_t>(int16_t(v.ints[i])); break;
      case ValueType::u32: put<uint32_t>(uint32_t(v.ints[i])); break;
      case ValueType::i32: put<int32_t>(int32_t(v.ints[i])); break;
      case ValueType::u64: put<uint64_t>(uint64_t(v.ints[i])); break;
      case ValueType::i64: put<int64_t>(v.ints[i]); break;
      case ValueType::boolean: put<uint8_t>(v.ints[i] ? 1 : 0); break;
      case ValueType::f32: put<float>(float(v.floats[i])); break;
      case ValueType::f64: put<double>(v.floats[i]); break;
      case ValueType::string: put_string(v.strings[i]); break;
      case ValueType::array: throw std::invalid_argument("gguf: nested arrays are not written");
    }
  }
  void put_value(const Value& v) {
    put<uint32_t>(uint32_t(v.type));
    if (!v.is_array()) return put_scalar(v.type, v, 0);
    put<uint32_t>(uint32_t(v.element));
    put<uint64_t>(v.size());
    for (size_t i = 0; i < v.size(); ++i) put_scalar(v.element, v, i);
  }
};

// The tensor's elements as the file stores them.
std::string encode_tensor(const Tensor& t, TensorType type) {
  const Tensor host = contiguous(to(to(t, Device::cpu()), DType::f32));
  const float* x = host.data<float>();
  const int64_t n = host.numel();
  std::string out(tensor_bytes(type, uint64_t(n)), '\0');
  char* dst = out.data();
  switch (type) {
    case TensorType::f32: std::memcpy(dst, x, size_t(n) * 4); break;
    case TensorType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = safetensors::float_to_half(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    case TensorType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = bfloat16::from_float(x[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      break;
    case TensorType::q8_0:
      // ggml's quantize_row_q8_0_ref: d = max|x| / 127 (as F16), q = round(x / d).
      for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const float* v = x + b * kQ8Block;
        float amax = 0;
        for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        const uint16_t dh = safetensors::float_to_half(d);
        char* block = dst + b * (2 + kQ8Block);
        std::memcpy(block, &dh, 2);
        for (int64_t i = 0; i < kQ8Block; ++i) block[2 + i] = char(int8_t(std::lround(v[i] * id)));
      }
      break;
  }
  return out;
}

// ---- reading ----

struct Reader {
  const std::string& bytes;
  const std::string& path;
  uint64_t pos = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path + ": " + what + " (at byte " + std::to_string(pos) +
                             "); it is not a GGUF file llama.cpp or mvgpt wrote, or it was cut short");
  }
  // A well-formed file that holds what mvgpt does not read.
  [[noreturn]] void unsupported(const std::string& what) const { throw std::runtime_error(path + ": " + what); }
  void need(uint64_t n, const char* what) const {
    if (n > bytes.size() - pos) fail(std::string("the file ends inside ") + what);
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string get_string(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    need(n, what);
    std::string s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
  // One scalar of type t appended to v.
  void get_scalar(ValueType t, Value& v, const std::string& key) {
    switch (t) {
      case ValueType::u8: v.ints.push_back(get<uint8_t>("a value")); break;
      case ValueType::i8: v.ints.push_back(get<int8_t>("a value")); break;
      case ValueType::u16: v.ints.push_back(get<uint16_t>("a value")); break;
      case ValueType::i16: v.ints.push_back(get<int16_t>("a value")); break;
      case ValueType::u32: v.ints.push_back(get<uint32_t>("a value")); break;
      case ValueType::i32: v.ints.push_back(get<int32_t>("a value")); break;
      case ValueType::i64: v.ints.push_back(get<int64_t>("a value")); break;
      case ValueType::u64: {
        const uint64_t u = get<uint64_t>("a value");
        if (u > uint64_t(std::numeric_limits<int64_t>::max())) unsupported("metadata " + shown(key) + " holds " + std::to_string(u) + ", too large");
        v.ints.push_back(int64_t(u));
        break;
      }
      case ValueType::boolean: {
        const uint8_t b = get<uint8_t>("a value");
        if (b > 1) fail("metadata " + shown(key) + " is a bool holding " + std::to_string(b));
        v.ints.push_back(b);
        break;
      }
      case ValueType::f32: v.floats.push_back(get<float>("a value")); break;
      case ValueType::f64: v.floats.push_back(get<double>("a value")); break;
      case ValueType::string: v.strings.push_back(get_string("a string")); break;
      default: fail("metadata " + shown(key) + " has value type " + std::to_string(uint32_t(t)) + ", which GGUF does not define");
    }
  }
  Value get_value(const std::string& key) {
    Value v;
    v.type = ValueType(get<uint32_t>("a value type"));
    if (!v.is_array()) {
      get_scalar(v.type, v, key);
      return v;
    }
    v.element = ValueType(get<uint32_t>("an array's type"));
    if (v.element == ValueType::array) unsupported("metadata " + shown(key) + " is an array of arrays, which mvgpt does not read");
    const uint64_t count = get<uint64_t>("an array's length");
    // Each element takes at least its scalar size (8 bytes of length for a string): a count the
    // rest of the file cannot hold is refused before anything is reserved.
    const uint64_t least = v.element == ValueType::string ? 8 : scalar_size(v.element);
    if (least == 0) fail("metadata " + shown(key) + " is an array of type " + std::to_string(uint32_t(v.element)));
    if (count > (bytes.size() - pos) / least) fail("metadata " + shown(key) + " claims " + std::to_string(count) + " elements");
    if (count > kMaxArray) unsupported("metadata " + shown(key) + " has " + std::to_string(count) + " elements; mvgpt reads up to " + std::to_string(kMaxArray));
    for (uint64_t i = 0; i < count; ++i) get_scalar(v.element, v, key);
    return v;
  }
};

Tensor decode_tensor(const char* src, const TensorInfo& info) {
  Tensor out = Tensor::empty(info.shape, DType::f32);
  float* y = out.data<float>();
  const int64_t n = out.numel();
  switch (info.type) {
    case TensorType::f32: std::memcpy(y, src, size_t(n) * 4); break;
    case TensorType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        y[i] = safetensors::half_to_float(h);
      }
      break;
    case TensorType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        y[i] = bfloat16::to_float(b);
      }
      break;
    case TensorType::q8_0:
      for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const char* block = src + b * (2 + kQ8Block);
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const float d = safetensors::half_to_float(dh);
        for (int64_t i = 0; i < kQ8Block; ++i) y[b * kQ8Block + i] = d * float(int8_t(block[2 + i]));
      }
      break;
  }
  return out;
}

}  // namespace

std::string tensor_type_name(TensorType type) {
  switch (type) {
    case TensorType::f32: return "F32";
    case TensorType::f16: return "F16";
    case TensorType::bf16: return "BF16";
    case TensorType::q8_0: return "Q8_0";
  }
  return "?";
}

std::optional<TensorType> parse_tensor_type(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (TensorType t : {TensorType::f32, TensorType::f16, TensorType::bf16, TensorType::q8_0})
    if (tensor_type_name(t) == upper) return t;
  return std::nullopt;
}

Value Value::u32(uint32_t v) { return {ValueType::u32, ValueType::u32, {int64_t(v)}, {}, {}}; }
Value Value::i32(int32_t v) { return {ValueType::i32, ValueType::u32, {int64_t(v)}, {}, {}}; }
Value Value::f32(float v) { return {ValueType::f32, ValueType::u32, {}, {double(v)}, {}}; }
Value Value::boolean(bool v) { return {ValueType::boolean, ValueType::u32, {int64_t(v)}, {}, {}}; }
Value Value::string(std::string v) { return {ValueType::string, ValueType::u32, {}, {}, {std::move(v)}}; }
Value Value::strings_array(std::vector<std::string> v) { return {ValueType::array, ValueType::string, {}, {}, std::move(v)}; }
Value Value::f32_array(const std::vector<float>& v) {
  return {ValueType::array, ValueType::f32, {}, std::vector<double>(v.begin(), v.end()), {}};
}
Value Value::i32_array(const std::vector<int32_t>& v) {
  return {ValueType::array, ValueType::i32, std::vector<int64_t>(v.begin(), v.end()), {}, {}};
}

size_t Value::size() const {
  if (!is_array()) return 1;
  return element == ValueType::string ? strings.size() : is_float(element) ? floats.size() : ints.size();
}

const Value* File::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

namespace {
const Value& scalar_at(const File& f, const std::string& key, bool (*ok)(ValueType), const char* want) {
  const Value* v = f.find(key);
  if (!v) throw std::runtime_error(f.path + ": metadata " + key + " is missing");
  if (v->is_array() || !ok(v->type))
    throw std::runtime_error(f.path + ": metadata " + key + " is " + (v->is_array() ? "an array" : value_type_name(v->type)) +
                             ", expected " + want);
  return *v;
}
}  // namespace

int64_t File::get_int(const std::string& key) const {
  return scalar_at(*this, key, [](ValueType t) { return is_integer(t) && t != ValueType::boolean; }, "an integer").ints[0];
}
double File::get_float(const std::string& key) const {
  return scalar_at(*this, key, is_float, "a float").floats[0];
}
bool File::get_bool(const std::string& key) const {
  return scalar_at(*this, key, [](ValueType t) { return t == ValueType::boolean; }, "a bool").ints[0] != 0;
}
const std::string& File::get_string(const std::string& key) const {
  return scalar_at(*this, key, [](ValueType t) { return t == ValueType::string; }, "a string").strings[0];
}
const Value& File::get_array(const std::string& key, ValueType element) const {
  const Value* v = find(key);
  if (!v) throw std::runtime_error(path + ": metadata " + key + " is missing");
  const bool fits = v->is_array() && (v->element == element || (is_integer(element) && is_integer(v->element) &&
                                                                 element != ValueType::boolean && v->element != ValueType::boolean));
  if (!fits)
    throw std::runtime_error(path + ": metadata " + key + " is " +
                             (v->is_array() ? std::string("an array of ") + value_type_name(v->element) : value_type_name(v->type)) +
                             ", expected an array of " + value_type_name(element));
  return *v;
}

void save(const std::string& path, const Metadata& metadata, const std::vector<TensorOut>& tensors, bool replace) {
  std::set<std::string> seen;
  for (const auto& [key, v] : metadata)
    if (!seen.insert(key).second) throw std::invalid_argument("gguf: metadata key " + key + " twice");
  seen.clear();
  Writer w;
  w.put<uint32_t>(kMagic);
  w.put<uint32_t>(3);
  w.put<uint64_t>(tensors.size());
  w.put<uint64_t>(metadata.size());
  for (const auto& [key, v] : metadata) {
    w.put_string(key);
    w.put_value(v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorOut& t : tensors) {
    if (!seen.insert(t.name).second) throw std::invalid_argument("gguf: tensor " + t.name + " twice");
    const Shape& s = t.tensor.shape();
    if (s.empty() || s.size() > int(kMaxDims)) throw std::invalid_argument("gguf: tensor " + t.name + " has " + std::to_string(s.size()) + " dims");
    if (!is_floating(t.tensor.dtype())) throw std::invalid_argument("gguf: tensor " + t.name + " is not a float tensor");
    if (t.type == TensorType::q8_0 && s.back() % kQ8Block != 0)
      throw std::invalid_argument("gguf: tensor " + t.name + " has rows of " + std::to_string(s.back()) +
                                  ", which Q8_0 cannot hold (a multiple of 32)");
    w.put_string(t.name);
    w.put<uint32_t>(uint32_t(s.size()));
    for (int d = s.size() - 1; d >= 0; --d) w.put<uint64_t>(uint64_t(s[d]));
    w.put<uint32_t>(uint32_t(t.type));
    w.put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = align_up(offset + tensor_bytes(t.type, uint64_t(t.tensor.numel())), kDefaultAlignment);
  }
  w.bytes.resize(align_up(w.bytes.size(), kDefaultAlignment), '\0');

  util::AtomicFileWriter out(path);
  out.write(w.bytes);
  uint64_t written = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.write(std::string(offsets[i] - written, '\0'));
    const std::string data = encode_tensor(tensors[i].tensor, tensors[i].type);
    out.write(data);
    written = offsets[i] + data.size();
  }
  out.write(std::string(offset - written, '\0'));
  out.commit(replace);
}

File read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r{bytes, path};
  File f;
  f.path = path;
  if (bytes.size() < 4 || r.get<uint32_t>("the magic") != kMagic)
    throw std::runtime_error(path + ": not a GGUF file (it does not begin with \"GGUF\")");
  f.version = r.get<uint32_t>("the version");
  if (f.version != 2 && f.version != 3)
    r.unsupported("GGUF version " + std::to_string(f.version) + "; mvgpt reads versions 2 and 3 (llama.cpp's since 2023)");
  const uint64_t n_tensors = r.get<uint64_t>("the tensor count"), n_kv = r.get<uint64_t>("the metadata count");
  // Every entry takes at least 8 bytes (its name's length): counts the file cannot hold are refused.
  if (n_tensors > bytes.size() / 8 || n_kv > bytes.size() / 8)
    r.fail("it claims " + std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) + " metadata entries");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.get_string("a metadata key");
    if (!seen.insert(key).second) r.fail("metadata " + shown(key) + " appears twice");
    Value v = r.get_value(key);
    f.metadata.emplace_back(std::move(key), std::move(v));
  }
  uint64_t alignment = kDefaultAlignment;
  if (f.find("general.alignment")) {
    const int64_t a = f.get_int("general.alignment");
    if (a <= 0 || (a & (a - 1)) != 0) r.fail("general.alignment is " + std::to_string(a) + ", not a power of two");
    alignment = uint64_t(a);
  }
  seen.clear();
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo info;
    info.name = r.get_string("a tensor name");
    if (!seen.insert(info.name).second) r.fail("tensor " + shown(info.name) + " appears twice");
    const uint32_t n_dims = r.get<uint32_t>("a tensor's dims");
    if (n_dims == 0 || n_dims > kMaxDims) r.fail("tensor " + shown(info.name) + " has " + std::to_string(n_dims) + " dims");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.get<uint64_t>("a tensor's dims");
      if (ne == 0 || ne > (uint64_t(1) << 40) || numel > bytes.size() / ne) r.fail("tensor " + shown(info.name) + " has a dim of " + std::to_string(ne));
      numel *= ne;
      info.shape.insert(0, int64_t(ne));
    }
    const uint32_t type = r.get<uint32_t>("a tensor's type");
    if (type != 0 && type != 1 && type != 8 && type != 30)
      r.unsupported("tensor " + shown(info.name) + " has ggml type " + std::to_string(type) +
                    "; mvgpt reads F32 (0), F16 (1), Q8_0 (8) and BF16 (30): convert the file to one of them first "
                    "(llama-quantize --allow-requantize IN OUT F16)");
    info.type = TensorType(type);
    if (info.type == TensorType::q8_0 && info.shape.back() % kQ8Block != 0)
      r.fail("tensor " + shown(info.name) + " is Q8_0 with rows of " + std::to_string(info.shape.back()));
    info.offset = r.get<uint64_t>("a tensor's offset");
    f.infos.push_back(std::move(info));
  }
  const uint64_t data_start = align_up(r.pos, alignment);
  if (data_start > bytes.size()) r.fail("the data section is missing");
  const uint64_t data_size = bytes.size() - data_start;
  // Each tensor starts where the one before it ends, aligned (as ggml requires): no two overlap,
  // so what is decoded is at most the file's size.
  uint64_t expected = 0;
  for (const TensorInfo& info : f.infos) {
    uint64_t numel = 1;
    for (int64_t d : info.shape) numel *= uint64_t(d);
    const uint64_t n = tensor_bytes(info.type, numel);
    if (info.offset != expected)
      throw std::runtime_error(path + ": tensor " + shown(info.name) + " starts at " + std::to_string(info.offset) + " of the data, not " +
                               std::to_string(expected) + " (where the one before it ends, aligned); the file is damaged");
    if (info.offset > data_size || n > data_size - info.offset)
      throw std::runtime_error(path + ": tensor " + shown(info.name) + " (" + std::to_string(n) + " bytes at " +
                               std::to_string(info.offset) + ") runs past the end of the file; it was cut short");
    expected = align_up(info.offset + n, alignment);
  }
  for (const TensorInfo& info : f.infos) f.tensors.push_back(decode_tensor(bytes.data() + data_start + info.offset, info));
  return f;
}

}  // namespace mvgpt::gguf
