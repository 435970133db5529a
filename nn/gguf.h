#pragma once
// Reading and writing GGUF files, the format llama.cpp (and Ollama, LM Studio, llama-cpp-python)
// loads: typed metadata (key -> value) and tensors in one file, little-endian throughout.
//
// NOTE [ GGUF layout ]
//   "GGUF" u32 version (3) u64 tensor_count u64 metadata_count
//   metadata: key (u64 length + bytes), u32 value type, the value (an array is u32 element type,
//             u64 count, the elements; a string is u64 length + bytes)
//   tensor infos: name, u32 n_dims, u64 dims[n_dims] (innermost first: ggml's ne[0] is a row's
//             length, so our (out, in) weight is written as dims {in, out}), u32 ggml type,
//             u64 offset into the data section (a multiple of the alignment)
//   padding to "general.alignment" (32 when absent), then the data section.
// The bytes of a row-major tensor are the same in both, only the order of the dims is reversed.
// Tensors go out as F32, F16, BF16 or Q8_0 (blocks of 32: an F16 scale, then 32 int8; a row's length
// must be a multiple of 32) and are read back as float32 tensors; F32 round-trips bit for bit.
// read() validates everything against the file's size before it allocates (a hostile count or
// length is refused naming the file and the field), as safetensors::load does.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::gguf {

enum class ValueType : uint32_t { u8 = 0, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
enum class TensorType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

// "F32", "F16", "BF16", "Q8_0"; parse_tensor_type also takes them lower-case.
std::string tensor_type_name(TensorType type);
std::optional<TensorType> parse_tensor_type(const std::string& name);

// One metadata value: a scalar or an array of scalars of one type. Integers of every width are kept
// as int64 (a u64 above 2^63 - 1 is refused on reading), floats as double.
struct Value {
  ValueType type = ValueType::u32;
  ValueType element = ValueType::u32;  // for arrays
  std::vector<int64_t> ints;           // integer and boolean types
  std::vector<double> floats;          // f32, f64
  std::vector<std::string> strings;    // string

  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value strings_array(std::vector<std::string> v);
  static Value f32_array(const std::vector<float>& v);
  static Value i32_array(const std::vector<int32_t>& v);

  bool is_array() const { return type == ValueType::array; }
  size_t size() const;  // elements of an array, 1 for a scalar
};
using Metadata = std::vector<std::pair<std::string, Value>>;

struct TensorInfo {
  std::string name;
  Shape shape;  // ours: outermost first (the file's dims reversed)
  TensorType type = TensorType::f32;
  uint64_t offset = 0;  // into the data section
};

struct File {
  std::string path;
  uint32_t version = 3;
  Metadata metadata;
  std::vector<TensorInfo> infos;
  std::vector<Tensor> tensors;  // float32, one per info, in the file's order

  const Value* find(const std::string& key) const;
  // The value at `key`, or std::runtime_error "<path>: metadata <key> is missing" / "is <type>,
  // expected <what>".
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const Value& get_array(const std::string& key, ValueType element) const;
};

struct TensorOut {
  std::string name;
  Tensor tensor;  // any device and layout, float dtype
  TensorType type = TensorType::f32;
};

// Writes version 3 with 32-byte alignment, metadata in the given order. Atomic
// (util::AtomicFileWriter); `replace` false: refuses (std::runtime_error) when `path` exists, at the
// last step too (a file created meanwhile is never replaced). std::invalid_argument before anything
// is written for a Q8_0 tensor whose rows are not a multiple of 32 and for duplicate names or keys.
void save(const std::string& path, const Metadata& metadata, const std::vector<TensorOut>& tensors, bool replace = false);

File read(const std::string& path);

}  // namespace mvgpt::gguf
