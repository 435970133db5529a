#include <mvgpt/nn/safetensors.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "nn/temp_dir.h"
#include <mvgpt/tensor/allocator.h>

namespace mvgpt {
namespace {

using safetensors::load;
using safetensors::save;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

const std::string kFixture = std::string(MVGPT_SOURCE_DIR) + "/tests/fixtures/safetensors/torch_fixture.safetensors";

// A file with the given header text and data section (no padding, which the format allows).
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(n >> (8 * i));
  return out + header + data;
}

// Runs f, expects a std::runtime_error whose message holds every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL() << "expected an error mentioning " << *parts.begin();
  } catch (const std::runtime_error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// Every element of a CPU tensor as double, row-major.
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(Safetensors, ReadsTheTorchFixture) {
  // Values from scripts/make_safetensors_fixture.py (PyTorch's own rounding to f32 / bf16).
  for (bool mmap : {true, false}) {
    SCOPED_TRACE(mmap ? "mmap" : "read");
    safetensors::File f = load(kFixture, {.mmap = mmap});
    ASSERT_EQ(f.tensors.size(), 8u);
    EXPECT_EQ(f.metadata.at("producer"), "make_safetensors_fixture.py");
    EXPECT_EQ(f.metadata.at("format"), "pt");
    // Data-section order: by decreasing element size, then name.
    std::vector<std::string> names;
    for (const auto& [n, t] : f.tensors) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"ids_i64", "values_f64", "empty_f32", "scalar_f32", "weight_f32",
                                               "half_bf16", "odd_bf16", "mask_bool"}));

    const Tensor& w = f.at("weight_f32");
    EXPECT_EQ(w.dtype(), DType::f32);
    EXPECT_EQ(w.shape(), (Shape{2, 3}));
    EXPECT_EQ(w.name(), "weight_f32");
    std::vector<float> wv = w.to_vector<float>();
    EXPECT_EQ(wv, (std::vector<float>{1.0f, -2.5f, 0.1f, 1.0f / 3.0f, 1e-7f, -0.0f}));
    EXPECT_TRUE(std::signbit(wv[5]));

    const Tensor& d = f.at("values_f64");
    EXPECT_EQ(d.dtype(), DType::f64);
    EXPECT_EQ(values(d), (std::vector<double>{0.1, -1.0 / 3.0, 12345.678901234567}));

    const Tensor& h = f.at("half_bf16");
    EXPECT_EQ(h.dtype(), DType::bf16);
    EXPECT_EQ(h.shape(), (Shape{2, 2}));
    const bfloat16* hp = h.data<bfloat16>();
    EXPECT_EQ(hp[0].bits, bfloat16(1.0f).bits);
    EXPECT_EQ(hp[1].bits, 15821);  // torch's bf16(0.1); our rounding agrees:
    EXPECT_EQ(hp[1].bits, bfloat16(0.1f).bits);
    EXPECT_EQ(float(hp[2]), -3.140625f);
    EXPECT_EQ(hp[3].bits, 16043);
    EXPECT_EQ(hp[3].bits, bfloat16(1.0f / 3.0f).bits);

    EXPECT_EQ(values(f.at("odd_bf16")), (std::vector<double>{0.5, 2.0, -4.0}));
    EXPECT_EQ(f.at("ids_i64").to_vector<int64_t>(), (std::vector<int64_t>{0, -1, int64_t(1) << 40}));
    EXPECT_EQ(f.at("scalar_f32").shape(), Shape{});
    EXPECT_EQ(f.at("scalar_f32").item<float>(), 7.25f);
    EXPECT_EQ(f.at("empty_f32").shape(), (Shape{0, 4}));
    EXPECT_EQ(f.at("mask_bool").dtype(), DType::boolean);
    EXPECT_EQ(f.at("mask_bool").to_vector<int>(), (std::vector<int>{1, 0, 1}));
  }
}

TEST(Safetensors, MmapLoadAllocatesNothingAndOutlivesTheFile) {
  TempDir dir;
  std::string path = dir.file("copy.safetensors");
  std::filesystem::copy_file(kFixture, path);
  Allocator& alloc = allocator_for(Device::cpu());
  size_t before = alloc.live_bytes();
  Tensor w;
  {
    safetensors::File f = load(path);
    EXPECT_EQ(alloc.live_bytes(), before);  // every tensor of the fixture is aligned: all zero-copy
    w = f.at("weight_f32");
  }
  std::filesystem::remove(path);  // the mapping keeps the data alive
  EXPECT_EQ(w.to_vector<float>()[1], -2.5f);
  size_t before_read = alloc.live_bytes();
  safetensors::File g = load(kFixture, {.mmap = false});
  EXPECT_GT(alloc.live_bytes(), before_read);
}

TEST(Safetensors, WritingALoadedTensorLeavesTheFileAlone) {
  TempDir dir;
  std::string path = dir.file("cow.safetensors");
  std::filesystem::copy_file(kFixture, path);
  std::string original = read_bytes(path);
  {
    safetensors::File f = load(path);
    f.at("weight_f32").data<float>()[0] = 42.0f;
    EXPECT_EQ(f.at("weight_f32").data<float>()[0], 42.0f);
  }
  EXPECT_EQ(read_bytes(path), original);
}

TEST(Safetensors, RoundTripKeepsOrderValuesAndMetadata) {
  TempDir dir;
  std::string path = dir.file("rt.safetensors");
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  // A transposed view (non-contiguous) must be written in its logical row-major order.
  Tensor at = a.as_strided({3, 2}, {1, 3}, 0);
  Tensor sliced = a.as_strided({2}, {3}, 1);  // column 1: {2, 5}
  Tensor expanded = Tensor::from_vector<double>({7, 8}, {2}).as_strided({3, 2}, {0, 1}, 0);
  Tensor b = Tensor::from_vector<bfloat16>({bfloat16(1.5f), bfloat16(-2.0f)}, {2});
  Tensor ids = Tensor::from_vector<int32_t>({3, -4}, {1, 2});
  Tensor flags = Tensor::from_vector<bool>({true, false}, {2});
  Tensor empty = Tensor::empty({0, 3}, DType::f64);
  Tensor scalar = Tensor::scalar<int64_t>(-9);
  safetensors::NamedTensors in = {{"z.first", at},    {"b", b},         {"sliced", sliced}, {"expanded", expanded},
                                  {"ids", ids},       {"flags", flags}, {"empty", empty},   {"scalar", scalar},
                                  {"a", a}};
  save(path, in, {{"step", "12"}, {"note", "hello"}});

  // Header: length multiple of 8, metadata first, tensors in the given order, compact JSON.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"note\":\"hello\",\"step\":\"12\"},\"z.first\":{\"dtype\":\"F32\",\"shape\":[3,2],"
                         "\"data_offsets\":[0,24]},\"b\":",
                         0),
            0u)
      << header;

  for (bool mmap : {true, false}) {
    safetensors::File f = load(path, {.mmap = mmap});
    ASSERT_EQ(f.tensors.size(), in.size());
    EXPECT_EQ(f.metadata, (safetensors::Metadata{{"step", "12"}, {"note", "hello"}}));
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(f.tensors[i].first, in[i].first);  // the data order is the given order
      const Tensor& got = f.tensors[i].second;
      EXPECT_EQ(got.dtype(), in[i].second.dtype()) << in[i].first;
      EXPECT_EQ(got.shape(), in[i].second.shape()) << in[i].first;
      EXPECT_TRUE(got.is_contiguous());
      EXPECT_EQ(values(got), values(in[i].second)) << in[i].first;
    }
    EXPECT_EQ(values(f.at("z.first")), (std::vector<double>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(values(f.at("sliced")), (std::vector<double>{2, 5}));
    EXPECT_EQ(values(f.at("expanded")), (std::vector<double>{7, 8, 7, 8, 7, 8}));
  }
}

TEST(Safetensors, MisalignedTensorsAreCopied) {
  TempDir dir;
  std::string path = dir.file("odd.safetensors");
  // 3 bf16 (6 bytes) then f32: the f32 starts at data offset 6, not a multiple of 4.
  save(path, {{"odd", Tensor::from_vector<bfloat16>({bfloat16(1.f), bfloat16(2.f), bfloat16(3.f)})},
              {"f", Tensor::from_vector<float>({0.25f, -8.f})}});
  safetensors::File f = load(path);
  const Tensor& t = f.at("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 4, 0u);
  EXPECT_EQ(values(t), (std::vector<double>{0.25, -8}));
  EXPECT_EQ(values(f.at("odd")), (std::vector<double>{1, 2, 3}));
}

TEST(Safetensors, FailedSaveLeavesTheOldFile) {
  TempDir dir;
  std::string path = dir.file("keep.safetensors");
  save(path, {{"x", Tensor::from_vector<float>({1, 2})}});
  std::string good = read_bytes(path);
  expect_error([&] { save(path, {{"x", Tensor::from_vector<float>({3})}, {"y", Tensor()}}); }, {path, "'y'", "undefined"});
  expect_error([&] { save(path, {{"x", Tensor::from_vector<float>({3})}, {"x", Tensor::from_vector<float>({3})}}); },
               {"'x'", "twice"});
  expect_error([&] { save(path, {{"__metadata__", Tensor::from_vector<float>({3})}}); }, {"reserved"});
  EXPECT_EQ(read_bytes(path), good);
  // Nothing but the good file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_THROW(save(dir.file("no/such/dir/x.safetensors"), {{"x", Tensor::from_vector<float>({1})}}),
               std::runtime_error);
}

TEST(Safetensors, EmptyFileHoldsNoTensors) {
  TempDir dir;
  std::string path = dir.file("empty.safetensors");
  save(path, {});
  safetensors::File f = load(path);
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_FALSE(f.contains("x"));
  expect_error([&] { (void)f.at("x"); }, {path, "'x'"});
}

TEST(Safetensors, RejectsBrokenHeadersBeforeReadingData) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  auto check = [&](const std::string& bytes, std::initializer_list<std::string> parts) {
    write_bytes(path, bytes);
    expect_error([&] { load(path); }, parts);
    expect_error([&] { safetensors::read_header(path); }, parts);
  };
  const std::string eight(8, 'x');
  check("abc", {path, "too short"});
  {
    std::string b = file_bytes("{}", "");
    b[0] = char(200);  // claims a 200-byte header in a 10-byte file
    check(b, {path, "header length 200", "past the end"});
  }
  check(file_bytes("{\"a\":", ""), {path, "not valid JSON"});
  check(file_bytes("[1, 2]", ""), {path, "start with '{'"});
  // A tensor named twice: nlohmann would keep the second entry silently.
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   eight),
        {path, "duplicate field \"w\""});
  check(file_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "xx"),
        {path, "'w'", "unsupported dtype 'F8_E4M3' (supported: F32, F64, F16"});
  check(file_bytes(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", eight), {path, "'w'", "dtype"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight), {path, "'w'", "shape"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight), {path, "'w'", "data_offsets"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
        {path, "'w'", "needs 12 bytes", "hold 8"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", eight),
        {path, "'w'", "2^64"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight), {path, "'w'", "end before"});
  check(file_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
        {path, "'w'", "past the data section"});
  check(file_bytes(R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   eight),
        {path, "'v'", "overlap", "'u'"});
  check(file_bytes(R"({"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), {path, "'u'", "gap"});
  check(file_bytes(R"({"u":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight), {path, "trailing"});
  check(file_bytes(R"({"__metadata__":{"k":1}})", ""), {path, "__metadata__", "'k'"});
  check(file_bytes(R"({"w":[1]})", ""), {path, "'w'", "not an object"});

  // A good file cut short: the last tensor now runs past the end.
  std::string good = read_bytes(kFixture);
  check(good.substr(0, good.size() - 2), {path, "'mask_bool'", "past the data section"});
  expect_error([&] { load(dir.file("missing.safetensors")); }, {"missing.safetensors", "cannot open"});
}

// ---- F16 (IEEE half), the dtype of most published checkpoints

TEST(SafetensorsF16, HalfConversionsAreExactAndRoundToNearestEven) {
  using safetensors::float_to_half;
  using safetensors::half_to_float;
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);            // the largest half
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));  // the smallest normal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)) && half_to_float(0x8000) == 0.0f);
  EXPECT_EQ(half_to_float(0x7C00), INFINITY);
  EXPECT_EQ(half_to_float(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)) && std::isnan(half_to_float(0x7C01)));
  // Every half survives float and back (NaNs stay NaNs).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(uint16_t(h));
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    else ASSERT_EQ(float_to_half(f), h) << h;
  }
  // Ties go to the even neighbour; past 65504 + half an ulp is infinity; below 2^-25 is zero.
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // halfway between 0x3C00 and 0x3C01
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // halfway between 0x3C01 and 0x3C02
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);           // a tie with 0: even
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);           // 1.5 subnormal ulps: a tie, to even
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000);
}

TEST(SafetensorsF16, AFileWrittenElsewhereLoadsAsFloat32) {
  TempDir dir;
  const std::string path = dir.file("half.safetensors");
  // Built by hand: [1, -2, 65504, 2^-24] as F16 little-endian, then an I64 that must stay as it is.
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  std::string data = std::string("\x00\x3C\x00\xC0\xFF\x7B\x01\x00", 8) + std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);
  write_bytes(path, file_bytes(header, data));
  for (bool mmap : {true, false}) {
    safetensors::File f = load(path, {.mmap = mmap});
    const Tensor& h = f.at("h");
    EXPECT_EQ(h.dtype(), DType::f32);
    EXPECT_EQ(h.shape(), (Shape{2, 2}));
    EXPECT_EQ(values(h), (std::vector<double>{1, -2, 65504, std::ldexp(1.0, -24)}));
    EXPECT_EQ(values(f.at("i")), (std::vector<double>{7}));
  }
  // The size check counts 2 bytes an element.
  write_bytes(path, file_bytes(R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}})", std::string(4, '\0')));
  expect_error([&] { load(path); }, {"half.safetensors", "'h'", "F16", "needs 6 bytes"});
}

TEST(SafetensorsF16, SavingAsF16HalvesTheFloatsAndKeepsTheRest) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Tensor w = Tensor::from_vector<float>({0.1f, -3.5f, 1e-6f, 70000.f}, {2, 2});
  Tensor d = Tensor::from_vector<double>({1.0 / 3.0});
  Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3});
  Tensor b = Tensor::from_vector<bfloat16>({bfloat16(1.5f)});
  save(path, {{"w", w}, {"d", d}, {"ids", ids}, {"b", b}}, {{"format", "pt"}}, {.f16 = true});
  safetensors::Header h = safetensors::read_header(path);
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_TRUE(h.tensors[0].f16 && h.tensors[1].f16);  // w and d
  EXPECT_EQ(h.tensors[0].end - h.tensors[0].begin, 8u);
  EXPECT_FALSE(h.tensors[2].f16 || h.tensors[3].f16);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  safetensors::File f = load(path);
  const std::vector<double> got = values(f.at("w"));
  for (size_t i = 0; i < 4; ++i) {
    const float want = safetensors::half_to_float(safetensors::float_to_half(w.to_vector<float>()[i]));
    EXPECT_EQ(got[i], double(want)) << i;
  }
  EXPECT_EQ(got[3], double(INFINITY));  // past half's range
  EXPECT_NEAR(values(f.at("d"))[0], 1.0 / 3.0, 1e-3);
  EXPECT_EQ(values(f.at("ids")), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(f.at("b").dtype(), DType::bf16);
}

}  // namespace
}  // namespace mvgpt
