#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "apps/common/tensorboard.h"

namespace mvgpt::apps {
namespace {

TEST(TensorBoard, Crc32cKnownValue) {
  // The check value of CRC-32C for "123456789".
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
}

TEST(TensorBoard, ScalarsRoundTrip) {
  auto dir = std::filesystem::temp_directory_path() / ("mvgpt_tb_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    w.add_scalar("loss/train", 2.5, 10);
    w.add_scalar("lr", 6e-4, 10);
    w.add_text("settings", "| lr | 6e-4 |", 10);  // not a scalar: skipped by the reader
    w.add_scalar("loss/train", 2.25, 20);
    path = w.path();
  }
  auto events = read_scalar_events(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].tag, "loss/train");
  EXPECT_FLOAT_EQ(events[0].value, 2.5f);
  EXPECT_EQ(events[0].step, 10);
  EXPECT_EQ(events[1].tag, "lr");
  EXPECT_FLOAT_EQ(events[1].value, 6e-4f);
  EXPECT_EQ(events[2].step, 20);
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, CorruptionIsDetected) {
  auto dir = std::filesystem::temp_directory_path() / ("mvgpt_tb_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    w.add_scalar("loss", 1.0, 1);
    path = w.path();
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-6, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_THROW(read_scalar_events(path), std::runtime_error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mvgpt::apps
