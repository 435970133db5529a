#pragma once
// Reading and writing safetensors files (the format of Hugging Face's `safetensors`):
//   [8 bytes: header length N, little-endian u64] [N bytes: JSON header] [data section]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) and may hold "__metadata__": {string: string}.
//
// NOTE [ Zero-copy loading ]
// load() validates the whole header before it touches the data, then maps the file (mmap,
// MAP_PRIVATE) and returns CPU tensors whose Storage points into the mapping; the mapping lives
// until the last tensor using it dies. The mapping is copy-on-write: writing into a loaded tensor
// never changes the file. A tensor whose start is not aligned to its element size (possible in
// files written by other tools, or by save() when a 2-byte tensor of odd length precedes a wider
// one) is copied into fresh memory instead. Truncating the file while tensors still map it
// raises SIGBUS on access, as with any mmap; save() never truncates in place (it renames).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::safetensors {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// One header entry, as validated by read_header.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;  // what load() returns (float32 for the file's F16)
  bool f16 = false;          // the file holds IEEE half precision (F16), 2 bytes an element
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct Header {
  std::vector<TensorInfo> tensors;  // in data-section order
  Metadata metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section (8 + header length)
  uint64_t data_size = 0;
};

// "F32" <-> DType::f32 etc.; parse returns false on names we do not support. The file dtype "F16"
// (IEEE half, the dtype most published checkpoints use) has no DType: parse_header records it in
// TensorInfo::f16 and load() converts it to float32 (exactly: every half is a float).
std::string_view dtype_to_string(DType dtype);
bool dtype_from_string(std::string_view name, DType& dtype);

// Parses and checks a header without reading any tensor data. `header_json` is the JSON text and
// `data_size` the length of the data section that follows it; `path` is only used in messages.
// Throws std::runtime_error naming the file and the tensor for: invalid JSON, a non-object entry,
// unknown dtype, bad shape, numel * itemsize != end - begin, offsets reversed, overlapping, with
// gaps, or not ending exactly at the end of the data section.
Header parse_header(std::string_view header_json, uint64_t data_size, const std::string& path);
// Reads and checks the header of a file (also: file shorter than 8 bytes, header longer than the file).
Header read_header(const std::string& path);

struct LoadOptions {
  bool mmap = true;  // false: read into freshly allocated tensors (the file can then change freely)
};

struct File {
  std::string path;
  NamedTensors tensors;  // in data-section order
  Metadata metadata;

  bool contains(std::string_view name) const;
  // The tensor called `name`; throws naming the file and the tensor when absent.
  const Tensor& at(std::string_view name) const;
};

File load(const std::string& path, const LoadOptions& options = {});

// Writes tensors (any device, any layout; copied to contiguous CPU bytes) in the given order,
// with `metadata` first in the header. The header is compact JSON padded with spaces to a
// multiple of 8 bytes, like the reference implementation. Atomic (util::AtomicFileWriter): writes a
// temporary file, fsyncs it, renames it over `path`; on any error the old file is untouched.
struct SaveOptions {
  // Floating-point tensors (F32, F64) stored as F16, rounded to nearest even (overflow to infinity,
  // small values to half's subnormals): half the bytes of float32, as most published checkpoints.
  bool f16 = false;
};
void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {},
          const SaveOptions& options = {});

// IEEE half <-> float, round to nearest even (NaN stays a quiet NaN).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// The flat index of the first NaN or infinity in a floating-point tensor, or -1 when all are finite
// (and for integer tensors). Loaders call it: a flipped exponent byte or a diverged run's weights
// must stop at the file, not become a "nan" loss or an endless <|endoftext|>.
int64_t first_non_finite(const Tensor& t);
// What a loader checks of each weight it read from `path`, before anything is copied: a float dtype
// (std::runtime_error "<path>: tensor '<name>' is I32, expected a float dtype <for_what>") and
// finite values ("... holds a non-finite value (NaN or infinity) at element 3; <unusable>").
void require_finite_float(const std::string& path, const std::string& name, const Tensor& t, const std::string& for_what,
                          const std::string& unusable);

}  // namespace mvgpt::safetensors
