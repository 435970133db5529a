// dist: the world of one (no launcher), sharding and argument checks in process; the collectives
// and data-parallel pretraining under `mpirun -np 2` on this machine's loopback (skipped without
// mpirun): two ranks with half the batch each train the same model as one rank with all of it.
// The same over NCCL on two GPUs (skipped without a build with NCCL and two visible GPUs).
#include <cmath>
#include <cstdlib>
#include <optional>
#include <regex>
#include <utility>

#include "apps/app_runner.h"
#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::apps::testing {
namespace {

// ---- one process ----

TEST(DistWorld, WithoutALauncherIsAWorldOfOne) {
  ASSERT_EQ(dist::launched_size(), 1) << "the test itself must not run under mpirun";
  dist::init();
  EXPECT_TRUE(dist::initialized());
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::size(), 1);
  EXPECT_TRUE(dist::is_root());
  EXPECT_TRUE(dist::from_root(true));
  EXPECT_FALSE(dist::from_root(false));
  EXPECT_EQ(dist::mean_over_ranks(2.5), 2.5);
  float f[2] = {1, 2};
  dist::all_reduce_sum(f, 2);
  EXPECT_EQ(f[1], 2.0f);
  dist::barrier();
  EXPECT_FALSE(dist::transport().empty());
}

// Sets `name` to each case's value in turn and checks what `read` returns; restores `name` after.
void expect_env_reads(const char* name, int (*read)(), const std::vector<std::pair<const char*, int>>& cases) {
  const char* was = std::getenv(name);
  const std::optional<std::string> saved = was ? std::optional<std::string>(was) : std::nullopt;
  for (const auto& [value, expected] : cases) {
    ::setenv(name, value, 1);
    EXPECT_EQ(read(), expected) << name << "=" << value;
  }
  if (saved) ::setenv(name, saved->c_str(), 1);
  else ::unsetenv(name);
}

TEST(DistWorld, LaunchedSizeReadsTheLaunchersEnvironment) {
  expect_env_reads("PMI_SIZE", dist::launched_size, {{"3", 3}, {"three", 1}, {"0", 1}});
}

TEST(DistWorld, LocalRankReadsTheLaunchersEnvironment) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"), nullptr) << "the test itself must not run under mpirun";
  expect_env_reads("OMPI_COMM_WORLD_LOCAL_RANK", dist::local_rank, {{"2", 2}, {"-1", 0}, {"1x", 0}});
  expect_env_reads("SLURM_LOCALID", dist::local_rank, {{"1", 1}});  // Slurm's srun
  EXPECT_EQ(dist::local_rank(), 0);
}

TEST(DistWorld, ALoneProcessKeepsTheDeviceItAskedFor) {
  dist::init();
  EXPECT_EQ(dist::local_device(Device::cpu()), Device::cpu());
  // One rank: the index asked for stands, even with no such GPU (the app's own check reports that).
  EXPECT_EQ(dist::local_device(Device::cuda(3)), Device::cuda(3));
}

TEST(DataParallel, ShardRowsTakesEachRanksShare) {
  std::vector<int32_t> v(6 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(i);
  Tensor batch = Tensor::from_vector(v, Shape{6, 3});
  for (int r = 0; r < 3; ++r) {
    Tensor s = dist::shard_rows(batch, r, 3);
    ASSERT_EQ(s.shape(), (Shape{2, 3}));
    EXPECT_TRUE(s.is_contiguous());
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(read_element(s, i), double(r * 6 + i));
  }
  // A transposed (non-contiguous) batch: rows of the view, not of the storage.
  Tensor t = batch.as_strided({3, 6}, {1, 3}, 0);
  Tensor s1 = dist::shard_rows(t, 1, 3);
  ASSERT_EQ(s1.shape(), (Shape{1, 6}));
  for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(read_element(s1, j), double(j * 3 + 1));
  EXPECT_EQ(dist::shard_rows(batch, 0, 1).shape(), (Shape{6, 3}));
  EXPECT_EQ(dist::shard_rows(Tensor::empty({0, 4}, DType::i32), 1, 2).shape(), (Shape{0, 4}));
}

TEST(DataParallel, ShardRowsRejectsUnevenBatchesAndBadRanks) {
  Tensor batch = Tensor::empty({5, 2}, DType::i32);
  try {
    dist::shard_rows(batch, 0, 2);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("5 rows does not split into 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dist::shard_rows(batch, 2, 2), std::invalid_argument);
  EXPECT_THROW(dist::shard_rows(batch, -1, 2), std::invalid_argument);
  EXPECT_THROW(dist::shard_rows(batch, 0, 0), std::invalid_argument);
  EXPECT_THROW(dist::shard_rows(Tensor::scalar(1.0f), 0, 1), std::invalid_argument);
}

TEST(DataParallel, AverageGradientsChecksEveryParameterEvenAlone) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3});
  a.requires_grad_();
  a.set_name("a");
  Tensor b = Tensor::from_vector<float>({4, 5});
  b.requires_grad_();
  b.set_name("b");
  a.set_grad(Tensor::from_vector<float>({0.5f, 1, 2}));
  try {
    dist::average_gradients({a, b});
    FAIL() << "expected an error for b's missing gradient";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter b has no gradient"), std::string::npos) << e.what();
  }
  b.set_grad(Tensor::from_vector<float>({1, 1}));
  EXPECT_EQ(dist::average_gradients({a, b}), 0);  // one rank: nothing moves, nothing changes
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.5f, 1, 2}));
  EXPECT_THROW(dist::average_gradients({a}, 4), std::invalid_argument);  // bucket below one double
  EXPECT_EQ(dist::gradient_bytes({a, b}), 20);
}

// ---- several ranks, under mpirun ----

std::string mpirun() {
  const std::string path = MVGPT_MPIRUN;
  return path.find("NOTFOUND") == std::string::npos && !path.empty() && fs::exists(path) ? path : "";
}

// `mpirun -np <ranks> <exe> <args>` in `cwd`. Root may run it (CI does); single-copy transfers
// need ptrace rights containers often lack, so the shared-memory transport copies twice instead.
// In sanitizer builds the ranks skip leak checking: Open MPI keeps allocations until exit, some
// in plugins unloaded by then that no suppression can name; single-process runs still check leaks.
RunResult run_ranks(int ranks, const std::string& exe, const std::string& args, const fs::path& cwd) {
  return run_command("ASAN_OPTIONS=detect_leaks=0 '" + mpirun() + "' --oversubscribe --allow-run-as-root --bind-to none " +
                         "--mca btl self,vader --mca btl_vader_single_copy_mechanism none -np " + std::to_string(ranks) +
                         " '" + exe + "' " + args,
                     cwd);
}

std::string worker(bool with_mpi = true) {
  return std::string(MVGPT_BINARY_DIR) + "/tests/" + (with_mpi ? "test_dist_worker" : "test_dist_nompi_worker");
}

// Needs mpirun only.
class Launcher : public AppsTest {
 protected:
  void SetUp() override {
    if (mpirun().empty()) GTEST_SKIP() << "mpirun not found (install openmpi-bin): multi-rank tests skipped";
  }
};

// Needs mpirun and a build with MPI.
class DistRanks : public Launcher {
 protected:
  void SetUp() override {
    Launcher::SetUp();
#ifndef MVGPT_DIST_MPI
    GTEST_SKIP() << "built without MPI (install libopenmpi-dev and reconfigure): multi-rank tests skipped";
#endif
  }

  // Runs the worker's scenario `mode` on `ranks` ranks; each must print "rank <q>: ok".
  static RunResult expect_ranks_ok(const std::string& mode, int ranks) {
    RunResult r = run_ranks(ranks, worker(), mode, root());
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    for (int q = 0; q < ranks; ++q)
      EXPECT_NE(r.out.find("rank " + std::to_string(q) + ": ok"), std::string::npos)
          << mode << " on " << ranks << " ranks:\n" << r.out << r.err;
    return r;
  }
};

TEST_F(DistRanks, AverageGradientsIsTheMeanOverRanks) {
  for (int ranks : {2, 3}) expect_ranks_ok("reduce", ranks);
}

TEST_F(DistRanks, BroadcastGivesRankZerosValuesAndCatchesShapeMismatches) {
  expect_ranks_ok("broadcast", 2);
  RunResult r = run_ranks(2, worker(), "mismatch", root());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0: threw: dist::broadcast_tensors: 1 rank(s) hold tensors whose shapes"), std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("(this rank, 1, is one)"), std::string::npos) << r.out << r.err;
}

TEST_F(Launcher, BuildWithoutMpiRefusesSeveralRanks) {
  RunResult r = run_ranks(2, worker(false), "init", root());
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("launched as 2 ranks, but this build has no MPI"), std::string::npos) << r.err;
  // Alone it is a world of one, as usual.
  RunResult one = run_ranks(1, worker(false), "init", root());
  EXPECT_EQ(one.code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find("rank 0 of 1"), std::string::npos) << one.out;
}

// step -> (training loss, gradient norm), from "step     3/6 | loss 5.6789 | lr ... | norm  1.234" lines.
std::map<int, std::pair<double, double>> printed_losses(const std::string& out) {
  std::map<int, std::pair<double, double>> losses;
  std::regex line(R"(step +(\d+)/\d+ \| loss ([0-9.]+) \| lr [^|]+\| norm +([0-9.]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
    losses[std::stoi((*it)[1])] = {std::stod((*it)[2]), std::stod((*it)[3])};
  return losses;
}

// The rows of a CSV log after its header, split at commas (a trailing empty field kept).
std::vector<std::vector<std::string>> csv_columns(const fs::path& csv) {
  std::istringstream in(slurp(csv));
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::istringstream l(line);
    for (std::string f; std::getline(l, f, ',');) fields.push_back(f);
    if (!line.empty() && line.back() == ',') fields.push_back("");
    rows.push_back(fields);
  }
  return rows;
}

// Tensor by tensor, ||a - b|| <= rel ||b|| (L2 norms, in double), leaving out the key biases: their
// gradient is zero up to rounding (a key bias shifts every score of a row alike, which softmax
// ignores), and AdamW turns that rounding noise into steps of about lr, different noise in each run.
// The other parameters and all the optimizer state agree to about 1e-6 after six steps.
void expect_close_files(const fs::path& a, const fs::path& b, double rel) {
  auto fa = safetensors::load(a.string(), {.mmap = false}), fb = safetensors::load(b.string(), {.mmap = false});
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a;
  for (const auto& [name, tb] : fb.tensors) {
    const Tensor& ta = fa.at(name);
    ASSERT_EQ(ta.shape(), tb.shape()) << name;
    const bool qkv_bias = name.size() >= 16 && name.compare(name.size() - 16, 16, "attn.c_attn.bias") == 0;
    const int64_t width = tb.numel() / 3;  // (3 C): query, key, value
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < tb.numel(); ++i) {
      if (qkv_bias && i >= width && i < 2 * width) continue;
      const double x = read_element(ta, i), y = read_element(tb, i);
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    EXPECT_LE(std::sqrt(diff), rel * std::sqrt(norm)) << a.filename() << ": " << name;
    if (std::getenv("MVGPT_DIST_VERBOSE"))
      std::printf("%s %s: %.3g relative\n", a.filename().c_str(), name.c_str(), std::sqrt(diff / std::max(norm, 1e-300)));
  }
}

// The tiny model for six steps, without the device.
const std::string kTinyRun = "--config dist.json --batch-size 4 --eval-interval 3 --eval-windows 4 ";
const std::string kTiny = kTinyRun + "--device cpu ";

// Run `two` (2 ranks, rank 0's output) trained like run `one` (1 rank): the printed loss and
// gradient-norm curve, the logged losses, and the weights and optimizer state after six steps.
void expect_same_training(const RunResult& one, const RunResult& two, const fs::path& one_run, const fs::path& two_run) {
  // Rank 0 alone prints: one start line, six steps; the loss curve is the one-rank curve.
  EXPECT_EQ(std::count(two.out.begin(), two.out.end(), '\n'), std::count(one.out.begin(), one.out.end(), '\n') + 1) << two.out;
  auto l1 = printed_losses(one.out), l2 = printed_losses(two.out);
  ASSERT_EQ(l1.size(), 6u) << one.out;
  ASSERT_EQ(l2.size(), 6u) << two.out;
  for (const auto& [step, loss_norm] : l1) {
    EXPECT_NEAR(l2.at(step).first, loss_norm.first, 1.5e-4) << "printed loss at step " << step;
    // The norm before clipping: a sum instead of a mean would double it (AdamW would hide that).
    EXPECT_NEAR(l2.at(step).second, loss_norm.second, 1.5e-3) << "printed gradient norm at step " << step;
  }
  // The logged curve, with six digits: train and held-out losses to 1e-5 relative.
  auto c1 = csv_columns(one_run / "log.csv"), c2 = csv_columns(two_run / "log.csv");
  ASSERT_EQ(c1.size(), 6u);
  ASSERT_EQ(c2.size(), 6u);
  for (size_t i = 0; i < c1.size(); ++i)
    for (size_t col : {1, 2}) {
      ASSERT_EQ(c1[i][col].empty(), c2[i][col].empty()) << "row " << i << " column " << col;
      if (c1[i][col].empty()) continue;
      const double a = std::stod(c1[i][col]), b = std::stod(c2[i][col]);
      EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << "row " << i << " column " << col;
    }
  // After six AdamW steps the weights and the optimizer state agree to 1e-5 relative.
  for (const char* f : {"last/model.safetensors", "last/optimizer.safetensors", "best/model.safetensors"})
    expect_close_files(two_run / f, one_run / f, 1e-5);
}

TEST_F(DistRanks, TwoRanksWithHalfTheBatchTrainLikeOneWithAllOfIt) {
  const fs::path cwd = prepared();
  write_text(cwd / "dist.json", tiny_config(false));
  RunResult one = run_app("pretrain", kTiny + "--steps 6 --out one/run", cwd);
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  RunResult two = run_ranks(2, app_path("pretrain"), kTiny + "--steps 6 --out two/run", cwd);
  ASSERT_EQ(two.code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("data parallel: 2 ranks over MPI"), std::string::npos) << two.out;
  expect_same_training(one, two, cwd / "one" / "run", cwd / "two" / "run");
  // Rank 0 alone wrote the logs: one TensorBoard file, one CSV with six rows.
  EXPECT_EQ(std::distance(fs::directory_iterator(cwd / "two" / "run" / "tensorboard"), fs::directory_iterator()), 1);
  const std::string csv = slurp(cwd / "two" / "run" / "log.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7) << csv;

  // --resume on two ranks continues exactly: stopped at 3 and resumed to 6 = the run above, bit for
  // bit (the same folder name in another place, so the checkpoints' metadata match too).
  RunResult first = run_ranks(2, app_path("pretrain"), kTiny + "--steps 3 --schedule-steps 6 --out resumed/run", cwd);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  RunResult rest = run_ranks(2, app_path("pretrain"), "--resume --steps 6 --device cpu --out resumed/run", cwd);
  ASSERT_EQ(rest.code, 0) << rest.out << rest.err;
  EXPECT_NE(rest.out.find("resuming resumed/run at step 3"), std::string::npos) << rest.out;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(slurp(cwd / "two" / "run" / "last" / f) == slurp(cwd / "resumed" / "run" / "last" / f)) << f;
}

// With dropout in the model, rank r draws the masks of its rows of the global batch (the sharded
// stream), so two ranks still train like one process; with the same stream on both ranks the
// printed losses differ at the first step (checked when this test was written).
TEST_F(DistRanks, TwoRanksWithDropoutTrainLikeOneProcess) {
  const fs::path cwd = prepared();
  std::string config = tiny_config(true);
  config.insert(config.size() - 1, ", \"dropout\": 0.2");
  write_text(cwd / "dist.json", config);
  RunResult one = run_app("pretrain", kTiny + "--steps 6 --out one-drop/run", cwd);
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  RunResult two = run_ranks(2, app_path("pretrain"), kTiny + "--steps 6 --out two-drop/run", cwd);
  ASSERT_EQ(two.code, 0) << two.out << two.err;
  expect_same_training(one, two, cwd / "one-drop" / "run", cwd / "two-drop" / "run");
}

TEST_F(DistRanks, PretrainRefusesABatchThatDoesNotSplit) {
  const fs::path cwd = prepared();
  write_text(cwd / "dist.json", tiny_config(false));
  RunResult r = run_ranks(2, app_path("pretrain"), "--config dist.json --batch-size 5 --steps 2 --device cpu --out odd/run", cwd);
  EXPECT_NE(r.code, 0) << r.out << r.err;
  // Both ranks print it; their writes may interleave, so the message is looked for without the app name.
  EXPECT_NE(r.err.find("--batch-size 5 does not split over 2 ranks; use a multiple of 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(cwd / "odd" / "run" / "last"));
}

TEST_F(DistRanks, ShardedDropoutStreamsTrainLikeOneProcess) {
  for (int ranks : {2, 3}) expect_ranks_ok("dropout", ranks);
}

// ---- several ranks on GPUs, over NCCL ----

// Needs mpirun, a build with NCCL and two visible GPUs (one per rank, as NCCL requires).
class NcclRanks : public DistRanks {
 protected:
  void SetUp() override {
    DistRanks::SetUp();
    if (IsSkipped()) return;
#ifndef MVGPT_DIST_NCCL
    GTEST_SKIP() << "built without NCCL (needs the CUDA backend, MPI, and nccl.h/libnccl beside the CUDA toolkit): "
                    "NCCL tests skipped";
#endif
    if (const int gpus = cuda::device_count(); gpus < 2)
      GTEST_SKIP() << "NCCL tests need 2 visible CUDA devices, found " << gpus << ": skipped";
  }
};

TEST_F(NcclRanks, AverageGradientsOnGpusIsTheMeanOverRanks) {
  RunResult r = expect_ranks_ok("nccl-reduce", 2);
  EXPECT_NE(r.out.find("rank 1: over MPI ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("and NCCL 2."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on cuda:1"), std::string::npos) << "rank 1 should use its local GPU:\n" << r.out;
}

TEST_F(NcclRanks, BroadcastOnGpusGivesRankZerosValues) { expect_ranks_ok("nccl-broadcast", 2); }

// pretrain --device cuda under mpirun: each rank on its own GPU (dist::local_device), gradients over NCCL.
TEST_F(NcclRanks, TwoRanksOnTwoGpusTrainLikeOneGpu) {
  const fs::path cwd = prepared();
  write_text(cwd / "dist.json", tiny_config(false));
  const std::string args = kTinyRun + "--device cuda --steps 6 ";
  RunResult one = run_app("pretrain", args + "--out gpu-one/run", cwd);
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  RunResult two = run_ranks(2, app_path("pretrain"), args + "--out gpu-two/run", cwd);
  ASSERT_EQ(two.code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("data parallel: 2 ranks over MPI"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find(" and NCCL "), std::string::npos) << two.out;
  expect_same_training(one, two, cwd / "gpu-one" / "run", cwd / "gpu-two" / "run");
}

}  // namespace
}  // namespace mvgpt::apps::testing
