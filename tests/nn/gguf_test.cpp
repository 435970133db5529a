// GGUF files (nn/gguf.h): metadata of every kind and tensors of every type out and back, the dims in
// ggml's order on disk, the types' rounding against slow references, a file never replaced, and
// damaged or hostile files refused with an error (never a crash, never a huge allocation). llama.cpp
// itself reads what the model writer makes in tests/python/test_gguf.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <mvgpt/backends/ops.h>
#include <mvgpt/nn/gguf.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>

#include "nn/temp_dir.h"

namespace mvgpt::gguf {
namespace {

using mvgpt::testing::TempDir;

Tensor ramp(const Shape& shape, float scale) {
  std::vector<float> v(size_t(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37f * float(i) + 0.1f) * float(1 + i % 7);
  return Tensor::from_vector(v, shape);
}

Metadata every_kind() {
  Value u8;
  u8.type = ValueType::u8, u8.ints = {200};
  Value i64;
  i64.type = ValueType::i64, i64.ints = {-(int64_t(1) << 40)};
  Value f64;
  f64.type = ValueType::f64, f64.floats = {0.1};
  return {{"general.architecture", Value::string("gptneox")},
          {"a.u32", Value::u32(4000000000u)},
          {"a.i32", Value::i32(-7)},
          {"a.f32", Value::f32(0.25f)},
          {"a.bool", Value::boolean(true)},
          {"a.u8", u8},
          {"a.i64", i64},
          {"a.f64", f64},
          {"a.strings", Value::strings_array({"a", "", "\xe2\x96\x81x"})},
          {"a.floats", Value::f32_array({1.5f, -2.0f})},
          {"a.ints", Value::i32_array({3, -4, 5})}};
}

TEST(Gguf, MetadataOfEveryKindRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  save(path, every_kind(), {{"t", ramp({2, 3}, 1.0f), TensorType::f32}});
  const File f = read(path);
  EXPECT_EQ(f.version, 3u);
  const Metadata want = every_kind();
  ASSERT_EQ(f.metadata.size(), want.size());
  for (size_t i = 0; i < f.metadata.size(); ++i) {
    const auto& [k, v] = f.metadata[i];
    const auto& [k0, v0] = want[i];
    EXPECT_EQ(k, k0);
    EXPECT_EQ(v.type, v0.type) << k;
    EXPECT_EQ(v.ints, v0.ints) << k;
    EXPECT_EQ(v.floats, v0.floats) << k;
    EXPECT_EQ(v.strings, v0.strings) << k;
  }
  EXPECT_EQ(f.get_string("general.architecture"), "gptneox");
  EXPECT_EQ(f.get_int("a.u32"), 4000000000);
  EXPECT_TRUE(f.get_bool("a.bool"));
  EXPECT_EQ(f.get_float("a.f32"), 0.25);
  EXPECT_EQ(f.get_array("a.ints", ValueType::i32).ints, (std::vector<int64_t>{3, -4, 5}));
  // Asking for the wrong kind names the key and what it is.
  try {
    f.get_int("a.f32");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a.f32 is f32, expected an integer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_string("missing.key"), std::runtime_error);
}

TEST(Gguf, TensorsGoOutInGgmlOrderAndComeBackAsTheirTypeRoundsThem) {
  TempDir dir;
  const std::string path = dir.file("t.gguf");
  const Tensor w = ramp({3, 64}, 0.01f), v = ramp({5}, 3.0f);
  save(path, {}, {{"w32", w, TensorType::f32}, {"w16", w, TensorType::f16}, {"wbf", w, TensorType::bf16},
                  {"wq8", w, TensorType::q8_0}, {"v", v, TensorType::f32}});
  // The file's first tensor info: its name, 2 dims {64, 3} (innermost first), type F32, offset 0.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find("w32") + 3;
  uint32_t n_dims;
  uint64_t dims[2];
  std::memcpy(&n_dims, bytes.data() + at, 4);
  std::memcpy(dims, bytes.data() + at + 4, 16);
  EXPECT_EQ(n_dims, 2u);
  EXPECT_EQ(dims[0], 64u);
  EXPECT_EQ(dims[1], 3u);

  const File f = read(path);
  ASSERT_EQ(f.tensors.size(), 5u);
  const std::vector<float> x = w.to_vector<float>();
  auto values = [&](int i) { return f.tensors[i].to_vector<float>(); };
  EXPECT_EQ(f.infos[0].shape, (Shape{3, 64}));
  EXPECT_EQ(std::memcmp(values(0).data(), x.data(), x.size() * 4), 0);  // F32: bit for bit
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(values(1)[i], safetensors::half_to_float(safetensors::float_to_half(x[i])));
    EXPECT_EQ(values(2)[i], float(bfloat16(x[i])));
  }
  // Q8_0, against ggml's rule written out slowly: per block of 32, d = max|x| / 127 in F16, q = round(x / d).
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = safetensors::half_to_float(safetensors::float_to_half(amax / 127.0f)), id = 1.0f / (amax / 127.0f);
    for (size_t i = 0; i < 32; ++i) {
      const float q = std::round(x[b * 32 + i] * id);
      EXPECT_EQ(values(3)[b * 32 + i], d * q) << b << " " << i;
      EXPECT_NEAR(values(3)[b * 32 + i], x[b * 32 + i], amax / 127.0f) << b << " " << i;
    }
  }
  EXPECT_EQ(values(4), v.to_vector<float>());
  EXPECT_EQ(f.infos[3].type, TensorType::q8_0);
  EXPECT_EQ(parse_tensor_type("bf16"), TensorType::bf16);
  EXPECT_EQ(parse_tensor_type("Q8_0"), TensorType::q8_0);
  EXPECT_FALSE(parse_tensor_type("q4_k").has_value());
}

TEST(Gguf, RefusesWhatItCannotWriteBeforeTouchingTheFile) {
  TempDir dir;
  const std::string path = dir.file("r.gguf");
  EXPECT_THROW(save(path, {}, {{"w", ramp({2, 20}, 1.0f), TensorType::q8_0}}), std::invalid_argument);  // rows of 20
  EXPECT_THROW(save(path, {}, {{"a", ramp({2}, 1.0f)}, {"a", ramp({2}, 1.0f)}}), std::invalid_argument);
  EXPECT_THROW(save(path, {{"k", Value::u32(1)}, {"k", Value::u32(2)}}, {}), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Gguf, NeverReplacesAFile) {
  TempDir dir;
  const std::string path = dir.file("taken.gguf");
  util::write_file_atomic(path, "someone's\n");
  EXPECT_THROW(save(path, {}, {{"w", ramp({2}, 1.0f)}}), std::runtime_error);
  EXPECT_EQ(util::read_file(path), "someone's\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  save(path, {}, {{"w", ramp({2}, 1.0f)}}, /*replace=*/true);  // when asked to
  EXPECT_EQ(read(path).tensors.size(), 1u);
}

TEST(Gguf, DamagedOrHostileFilesAreRefusedNamingTheFile) {
  TempDir dir;
  const std::string good = dir.file("good.gguf");
  save(good, every_kind(), {{"w", ramp({4, 32}, 1.0f), TensorType::q8_0}, {"v", ramp({3}, 1.0f)}});
  const std::string bytes = util::read_file(good);
  const std::string bad = dir.file("bad.gguf");
  auto refused = [&](const std::string& content, const std::string& what) {
    { std::ofstream(bad, std::ios::binary | std::ios::trunc) << content; }
    try {
      read(bad);
      ADD_FAILURE() << "read a damaged file: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << what << ": " << e.what();
    }
  };
  // Cut short anywhere (the data section included; the padding after the last tensor holds nothing).
  for (size_t n = 0; n + 32 < bytes.size(); n += (n < 400 ? 1 : 37)) refused(bytes.substr(0, n), "cut at " + std::to_string(n));
  auto patched = [&](size_t at, const void* v, size_t n) {
    std::string b = bytes;
    std::memcpy(b.data() + at, v, n);
    return b;
  };
  const uint32_t version1 = 1, bad_type = 77;
  const uint64_t huge = uint64_t(1) << 62;
  refused("GGML" + bytes.substr(4), "another magic");
  refused(patched(4, &version1, 4), "version 1");
  refused(patched(8, &huge, 8), "a tensor count the file cannot hold");
  refused(patched(16, &huge, 8), "a metadata count the file cannot hold");
  // The strings array's length, then its first string's length.
  const size_t strings = bytes.find("a.strings") + 9 + 4 + 4;
  refused(patched(strings, &huge, 8), "an array longer than the file");
  refused(patched(strings + 8, &huge, 8), "a string longer than the file");
  // The first tensor info: dims, then type and offset.
  const size_t info = bytes.find("w", bytes.find("a.ints") + 6) + 1;
  refused(patched(info + 4, &huge, 8), "a dim the file cannot hold");
  refused(patched(info + 4 + 16, &bad_type, 4), "a type mvgpt does not read");
  const uint64_t unaligned = 3, past = 1 << 20;
  refused(patched(info + 4 + 16 + 4, &unaligned, 8), "an unaligned offset");
  refused(patched(info + 4 + 16 + 4, &past, 8), "an offset past the end");
  EXPECT_NO_THROW(read(good));

  // Well formed, but not what mvgpt reads: said plainly, not as damage.
  const uint32_t q4_k = 12;
  { std::ofstream(bad, std::ios::binary | std::ios::trunc) << patched(info + 4 + 16, &q4_k, 4); }
  try {
    read(bad);
    ADD_FAILURE() << "read a Q4_K tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ggml type 12"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("cut short"), std::string::npos) << e.what();
  }
}

TEST(Gguf, OverlappingTensorsAreRefusedBeforeAnythingIsDecoded) {
  TempDir dir;
  const std::string good = dir.file("two.gguf");
  save(good, {}, {{"a", ramp({64}, 1.0f)}, {"b", ramp({64}, 2.0f)}});
  std::string bytes = util::read_file(good);
  // b's offset (256: a's 64 floats) set to 0, where a is: both would read the same bytes.
  const size_t b_offset = bytes.find("b", bytes.find("a") + 1) + 1 + 4 + 8 + 4;
  uint64_t offset;
  std::memcpy(&offset, bytes.data() + b_offset, 8);
  ASSERT_EQ(offset, 256u);
  offset = 0;
  std::memcpy(bytes.data() + b_offset, &offset, 8);
  util::write_file_atomic(dir.file("overlap.gguf"), bytes);
  try {
    read(dir.file("overlap.gguf"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor b starts at 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mvgpt::gguf
