#pragma once
// Writes TensorBoard event files (TFRecord framing of Event protos with scalar and text summaries),
// so a training run can be watched with `tensorboard --logdir <run folder>`. The protobuf encoding is
// the few fields scalars and text need, written by hand: no protobuf dependency.
// tests/python/test_tensorboard.py reads a run's files with TensorBoard's own EventAccumulator.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace mvgpt::apps {

// CRC-32C (Castagnoli), as TFRecord frames use, and its masked form.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` and an events.out.tfevents.<time>.<host> file inside it.
  explicit TensorBoardWriter(const std::string& dir);
  void add_scalar(std::string_view tag, double value, int64_t step);
  // Markdown for TensorBoard's Text tab: a string tensor tagged for the "text" plugin.
  void add_text(std::string_view tag, std::string_view markdown, int64_t step);
  // Pushes the events to the file; std::runtime_error naming it and the reason when that fails
  // (add_scalar may throw the same).
  void flush();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void throw_write_error() const;
  void write_record(const std::string& bytes);
  std::string path_;
  std::ofstream out_;
};

// One scalar read back from an event file (for tests and tools).
struct ScalarEvent {
  std::string tag;
  float value;
  int64_t step;
};
// Reads every scalar of an event file (text summaries are skipped), checking each record's CRCs;
// throws naming the file on corruption.
std::vector<ScalarEvent> read_scalar_events(const std::string& path);

}  // namespace mvgpt::apps
