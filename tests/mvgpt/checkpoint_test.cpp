// Checkpoint folders: a bit-exact round trip, atomic replacement (a failed save leaves the old
// checkpoint as it was and no temporary folder), and loading errors that name the folder and what
// is wrong with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/nn/safetensors.h>
#include "mvgpt/tiny_models.h"
#include "nn/temp_dir.h"

namespace mvgpt::gpt {
namespace {

namespace fs = std::filesystem;
using mvgpt::testing::read_bytes;
using mvgpt::testing::TempDir;
using mvgpt::testing::write_bytes;

using testing::bitwise_equal;
using testing::tiny;

// Llama-style, with every non-default field set so the config round trip covers them.
GPTConfig tiny_llama() {
  GPTConfig c = testing::tiny_llama(/*tied=*/false);
  c.dropout = 0.125;
  return c;
}

std::shared_ptr<GPT> make_model(const GPTConfig& c, uint64_t seed) {
  Generator g(seed);
  return std::make_shared<GPT>(c, &g);
}


// Names in the folder's parent, to see what a save left behind.
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Runs f, which must throw; returns the message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

class RoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(RoundTrip, BitExactTensorsConfigAndMetadata) {
  const GPTConfig config = GetParam() == 2 ? tiny_llama() : tiny(GetParam() == 1);
  auto model = make_model(config, 3);
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, *model, {{"step", "120"}, {"note", "round trip"}});

  LoadedCheckpoint back = load_checkpoint(dir);
  EXPECT_EQ(back.model->config().to_json(), config.to_json());
  const GPTConfig& c = back.model->config();
  EXPECT_EQ(c.rope, config.rope);
  EXPECT_EQ(c.rope_base, config.rope_base);
  EXPECT_EQ(c.norm, config.norm);
  EXPECT_EQ(c.mlp, config.mlp);
  EXPECT_EQ(c.kv_heads(), config.kv_heads());
  EXPECT_EQ(c.hidden_size(), config.hidden_size());
  EXPECT_EQ(c.bias, config.bias);
  EXPECT_EQ(c.tie_embeddings, config.tie_embeddings);
  EXPECT_EQ(c.norm_eps, config.norm_eps);
  EXPECT_EQ(c.dropout, config.dropout);
  EXPECT_EQ(load_config(dir).to_json(), config.to_json());

  auto saved = model->state_dict(), loaded = back.model->state_dict();
  ASSERT_EQ(saved.size(), loaded.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(saved[i].first, loaded[i].first);
    EXPECT_TRUE(bitwise_equal(saved[i].second, loaded[i].second)) << saved[i].first;
  }
  EXPECT_EQ(back.metadata.at("step"), "120");
  EXPECT_EQ(back.metadata.at("note"), "round trip");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  EXPECT_FALSE(back.model->is_training());
  // The folder holds the two files and their checksums, nothing else; no temporary folder is left beside it.
  EXPECT_EQ(entries(dir), (std::set<std::string>{"checksums.json", "config.json", "model.safetensors"}));
  EXPECT_EQ(entries(tmp.path()), std::set<std::string>{"ckpt"});

  // Saving what was loaded gives the same bytes.
  const std::string again = tmp.file("again");
  save_checkpoint(again, *back.model, back.metadata);
  EXPECT_EQ(read_bytes(again + "/model.safetensors"), read_bytes(dir + "/model.safetensors"));
  EXPECT_EQ(read_bytes(again + "/config.json"), read_bytes(dir + "/config.json"));
}

INSTANTIATE_TEST_SUITE_P(LearnedRopeLlama, RoundTrip, ::testing::Values(0, 1, 2));

TEST(Checkpoint, CreatesParentFoldersAndAcceptsATrailingSlash) {
  TempDir tmp;
  auto model = make_model(tiny(true), 1);
  save_checkpoint(tmp.file("runs/a/ckpt"), *model);
  EXPECT_NO_THROW(load_checkpoint(tmp.file("runs/a/ckpt")));
  save_checkpoint(tmp.file("runs/b/ckpt/"), *model);
  EXPECT_NO_THROW(load_checkpoint(tmp.file("runs/b/ckpt")));
  EXPECT_EQ(entries(tmp.file("runs/b")), std::set<std::string>{"ckpt"});
}

TEST(Checkpoint, SavingOverAnExistingCheckpointReplacesTheWholeFolder) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  auto old_model = make_model(tiny(false), 1), new_model = make_model(tiny(true), 2);
  save_checkpoint(dir, *old_model, {}, [](const std::string& d) { write_bytes(d + "/optimizer.bin", "old state"); });
  ASSERT_TRUE(fs::exists(dir + "/optimizer.bin"));

  save_checkpoint(dir, *new_model, {}, [](const std::string& d) { write_bytes(d + "/progress.json", "{}"); });
  // The new checkpoint, complete, with its own extra files and none of the old one's.
  EXPECT_EQ(entries(dir), (std::set<std::string>{"checksums.json", "config.json", "model.safetensors", "progress.json"}));
  LoadedCheckpoint back = load_checkpoint(dir);
  EXPECT_TRUE(back.model->config().rope);
  auto a = new_model->state_dict(), b = back.model->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << a[i].first;
  EXPECT_EQ(entries(tmp.path()), std::set<std::string>{"ckpt"});
}

TEST(Checkpoint, AFailedSaveLeavesTheOldCheckpointUntouched) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  auto old_model = make_model(tiny(false), 1), new_model = make_model(tiny(true), 2);
  save_checkpoint(dir, *old_model, {{"step", "1"}});
  const std::string config_before = read_bytes(dir + "/config.json");
  const std::string weights_before = read_bytes(dir + "/model.safetensors");

  // The extra-files step fails after the new config and weights were written to the temporary folder.
  auto failing = [](const std::string& d) {
    write_bytes(d + "/optimizer.bin", "half written");
    throw std::runtime_error("disk full (simulated)");
  };
  EXPECT_EQ(error_of([&] { save_checkpoint(dir, *new_model, {{"step", "2"}}, failing); }), "disk full (simulated)");

  EXPECT_EQ(read_bytes(dir + "/config.json"), config_before);
  EXPECT_EQ(read_bytes(dir + "/model.safetensors"), weights_before);
  EXPECT_EQ(entries(dir), (std::set<std::string>{"checksums.json", "config.json", "model.safetensors"}));
  EXPECT_EQ(entries(tmp.path()), std::set<std::string>{"ckpt"});  // no "ckpt.tmp.<pid>" left behind
  EXPECT_EQ(load_checkpoint(dir).metadata.at("step"), "1");

  // With no checkpoint there before, a failed save leaves nothing at all.
  EXPECT_THROW(save_checkpoint(tmp.file("fresh"), *new_model, {}, failing), std::runtime_error);
  EXPECT_EQ(entries(tmp.path()), std::set<std::string>{"ckpt"});
}

// --- loading errors: each names the folder and what is wrong ---

class LoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = tmp.file("ckpt");
    save_checkpoint(dir, *make_model(tiny(false), 1));
    // These tests edit the files to reach each check behind the checksums (which would catch every
    // edit first): as with a checkpoint saved before checksums existed.
    fs::remove(dir + "/checksums.json");
  }
  std::string load_error() {
    return error_of([&] { load_checkpoint(dir); });
  }
  TempDir tmp;
  std::string dir;
};

TEST_F(LoadErrors, MissingFolder) {
  dir = tmp.file("nowhere");
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "no such checkpoint folder");
}

TEST_F(LoadErrors, MissingConfig) {
  fs::remove(dir + "/config.json");
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "config.json is missing");
}

TEST_F(LoadErrors, MissingWeights) {
  fs::remove(dir + "/model.safetensors");
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "model.safetensors is missing");
}

TEST_F(LoadErrors, InvalidConfigNamesTheFileAndField) {
  write_bytes(dir + "/config.json", R"({"vocab_size": 29, "n_head": 3, "n_embd": 8})");
  std::string e = load_error();
  EXPECT_HAS(e, dir + "/config.json");
  EXPECT_HAS(e, "n_head");
  write_bytes(dir + "/config.json", R"({"vocab_size": 29, "rope": "yes"})");
  EXPECT_HAS(load_error(), "field \"rope\"");
}

TEST_F(LoadErrors, RopeConfigWithLearnedPositionTensors) {
  // config.json says RoPE, but the weights still hold the table of positions.
  GPTConfig c = tiny(true);
  write_bytes(dir + "/config.json", c.to_json());
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "does not fit config.json");
  EXPECT_HAS(e, "unexpected: transformer.wpe.weight");
}

TEST_F(LoadErrors, LearnedConfigWithoutThePositionTable) {
  auto rope_model = make_model(tiny(true), 1);
  safetensors::save(dir + "/model.safetensors", rope_model->state_dict());
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "missing: transformer.wpe.weight");
}

TEST_F(LoadErrors, MisShapedTensorGivesExpectedAndFound) {
  auto state = make_model(tiny(false), 1)->state_dict();
  for (auto& [name, t] : state)
    if (name == "transformer.h.1.mlp.c_fc.weight") t = ops::zeros({31, 8}, DType::f32);
  safetensors::save(dir + "/model.safetensors", state);
  std::string e = load_error();
  EXPECT_HAS(e, dir);
  EXPECT_HAS(e, "transformer.h.1.mlp.c_fc.weight (expected [32, 8], found [31, 8])");
}

TEST_F(LoadErrors, TruncatedWeights) {
  const std::string path = dir + "/model.safetensors";
  std::string bytes = read_bytes(path);
  for (size_t keep : {bytes.size() - 4, bytes.size() / 2, size_t(5)}) {
    write_bytes(path, bytes.substr(0, keep));
    std::string e = load_error();
    EXPECT_HAS(e, path);
  }
}


// --- inputs that lie: NaN and integer tensors, keys given twice, numbers out of range ---

// The model's state with `name` replaced by `t`, written as the folder's model.safetensors.
void replace_tensor(const std::string& dir, const std::string& name, const Tensor& t) {
  auto state = make_model(tiny(false), 1)->state_dict();
  for (auto& [n, v] : state)
    if (n == name) v = t;
  safetensors::save(dir + "/model.safetensors", state);
}

TEST_F(LoadErrors, NonFiniteWeightsAreRefusedNamingTheFileAndTensor) {
  const std::string name = "transformer.h.0.attn.c_proj.weight";
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    Tensor t = ops::zeros({8, 8}, DType::f32);
    t.data<float>()[13] = bad;
    replace_tensor(dir, name, t);
    std::string e = load_error();
    EXPECT_HAS(e, dir + "/model.safetensors");
    EXPECT_HAS(e, "'" + name + "'");
    EXPECT_HAS(e, "non-finite value (NaN or infinity) at element 13");
  }
}

TEST(Checkpoint, ADivergedModelIsSavedWithValidChecksumsButRefusedOnLoad) {
  auto model = make_model(tiny(true), 1);
  { NoGradGuard no_grad; ops::copy_(model->state_dict()[0].second, ops::full({29, 8}, NAN, DType::f32)); }
  TempDir tmp;
  save_checkpoint(tmp.file("ckpt"), *model);
  EXPECT_TRUE(verify_checkpoint_files(tmp.file("ckpt")));
  EXPECT_HAS(error_of([&] { load_checkpoint(tmp.file("ckpt")); }), "'transformer.wte.weight' holds a non-finite value");
}

TEST_F(LoadErrors, IntegerOrBoolTensorsAreRefusedNotConverted) {
  const std::string name = "transformer.ln_f.weight";
  for (DType dtype : {DType::i32, DType::boolean}) {
    replace_tensor(dir, name, ops::zeros({8}, dtype));
    std::string e = load_error();
    EXPECT_HAS(e, dir + "/model.safetensors");
    EXPECT_HAS(e, "'" + name + "' is " + std::string(safetensors::dtype_to_string(dtype)));
    EXPECT_HAS(e, "expected a float dtype (F32)");
  }
}

TEST_F(LoadErrors, AKeyGivenTwiceInConfigIsRefused) {
  write_bytes(dir + "/config.json", R"({"vocab_size": 29, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8,
                                       "n_embd": 16})");
  std::string e = load_error();
  EXPECT_HAS(e, dir + "/config.json");
  EXPECT_HAS(e, "duplicate field \"n_embd\"");
}

TEST_F(LoadErrors, ANumberOutOfRangeNamesTheFileAndField) {
  write_bytes(dir + "/config.json", R"({"vocab_size": 29, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8,
                                       "rope_base": 1e400})");
  std::string e = load_error();
  EXPECT_HAS(e, dir + "/config.json");
  EXPECT_HAS(e, "field \"rope_base\": number out of range");
}

// --- checksums ---

// Flips one bit of the byte at `offset` from the end of the file.
void flip_bit(const std::string& path, size_t from_end) {
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - from_end] ^= 0x01;
  write_bytes(path, bytes);
}

TEST(Checksums, CoverEveryFileSavedAndCatchAFlippedBit) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, *make_model(tiny(false), 2), {}, [](const std::string& t) {
    write_bytes(t + "/optimizer.safetensors", "moments");
    write_bytes(t + "/state.json", "{\"step\": 3}");
  });
  const std::string manifest = read_bytes(dir + "/checksums.json");
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_HAS(manifest, std::string("\"") + f + "\"");
  EXPECT_TRUE(verify_checkpoint_files(dir));
  load_checkpoint(dir);

  // The lowest bit of a weight's mantissa: still a finite number, a slightly different model.
  flip_bit(dir + "/model.safetensors", 7);
  std::string e = error_of([&] { load_checkpoint(dir); });
  EXPECT_HAS(e, dir + "/model.safetensors does not match its checksum in checksums.json");
  flip_bit(dir + "/model.safetensors", 7);
  load_checkpoint(dir);

  // A caller's file: load_checkpoint does not read it, but verifies it too; verify_checkpoint_files
  // alone, or for some files only.
  write_bytes(dir + "/state.json", "{\"step\": 4}");
  EXPECT_HAS(error_of([&] { load_checkpoint(dir); }), dir + "/state.json does not match its checksum");
  EXPECT_HAS(error_of([&] { verify_checkpoint_files(dir); }), dir + "/state.json does not match its checksum");
  EXPECT_TRUE(verify_checkpoint_files(dir, {"config.json", "optimizer.safetensors"}));
  write_bytes(dir + "/state.json", "{\"step\": 3}\n");
  EXPECT_HAS(error_of([&] { verify_checkpoint_files(dir); }), dir + "/state.json is 12 bytes, checksums.json records 11");
  fs::remove(dir + "/state.json");
  EXPECT_HAS(error_of([&] { verify_checkpoint_files(dir); }), dir + "/state.json is missing");

  // config.json, read on its own too.
  flip_bit(dir + "/config.json", 3);
  EXPECT_HAS(error_of([&] { load_config(dir); }), dir + "/config.json does not match its checksum");
}

TEST(Checksums, ACheckpointWithoutThemStillLoads) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, *make_model(tiny(true), 2));
  fs::remove(dir + "/checksums.json");  // as saved before checksums existed
  EXPECT_FALSE(verify_checkpoint_files(dir));
  load_checkpoint(dir);
}

TEST(Checksums, AMalformedManifestIsAnErrorNamingIt) {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, *make_model(tiny(true), 2));
  for (const char* text : {"{\"algorithm\": \"md5\", \"files\": {}}", "{\"algorithm\": \"xxh64\", \"files\": {\"config.json\": {\"bytes\": 1}}}",
                           "not json", "{\"algorithm\": \"xxh64\", \"algorithm\": \"xxh64\", \"files\": {}}"}) {
    write_bytes(dir + "/checksums.json", text);
    EXPECT_HAS(error_of([&] { load_checkpoint(dir); }), dir + "/checksums.json");
  }
}

}  // namespace
}  // namespace mvgpt::gpt
