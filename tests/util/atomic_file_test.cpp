#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <mvgpt/util/atomic_file.h>
#include "nn/temp_dir.h"

namespace mvgpt::util {
namespace {

// Each test's own folder, removed when it ends (a folder per process id was left in /tmp by every
// run of the suite).
class AtomicFile : public ::testing::Test {
 protected:
  const std::filesystem::path& temp_dir() const { return dir_.path(); }

 private:
  mvgpt::testing::TempDir dir_;
};

TEST_F(AtomicFile, WritesAndReplaces) {
  auto p = (temp_dir() / "a.txt").string();
  write_file_atomic(p, "first");
  write_file_atomic(p, "second");
  EXPECT_EQ(read_file(p), "second");
}

TEST_F(AtomicFile, AbandonedWriteLeavesTheOldFile) {
  auto p = (temp_dir() / "b.txt").string();
  write_file_atomic(p, "good");
  {
    AtomicFileWriter w(p);
    w.write("half a fi");
    // No commit: as if an exception unwound through here.
  }
  EXPECT_EQ(read_file(p), "good");
  for (auto& e : std::filesystem::directory_iterator(temp_dir()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

TEST_F(AtomicFile, NeverWritesThroughAFileAtItsTemporaryName) {
  auto p = (temp_dir() / "c.txt").string();
  const std::string tmp = p + ".tmp." + std::to_string(::getpid());
  write_file_atomic(tmp, "someone's");  // not ours, whatever its name
  EXPECT_THROW(write_file_atomic(p, "x"), std::runtime_error);
  EXPECT_EQ(read_file(tmp), "someone's");
  EXPECT_FALSE(std::filesystem::exists(p));
  std::filesystem::remove(tmp);
}

TEST_F(AtomicFile, CommitWithoutReplaceKeepsAFileThatAppeared) {
  auto p = (temp_dir() / "d.txt").string();
  AtomicFileWriter w(p);
  w.write("mine");
  { std::ofstream(p) << "theirs"; }  // made by someone else while we wrote
  EXPECT_THROW(w.commit(/*replace=*/false), std::runtime_error);
  EXPECT_EQ(read_file(p), "theirs");
}

TEST_F(AtomicFile, MissingFolderIsAClearError) {
  try {
    write_file_atomic("/nonexistent-dir/x.bin", "x");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.bin"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFile, ReadMissingFileNamesIt) {
  EXPECT_THROW(read_file("/nonexistent-file"), std::runtime_error);
}

}  // namespace
}  // namespace mvgpt::util
