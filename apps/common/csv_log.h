#pragma once
// A CSV log that training appends to, one row per step, flushed as it goes so other programs
// (gnuplot, a spreadsheet) can read it while the run goes on.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace mvgpt::apps {

class CsvLog {
 public:
  // Starts `path` with `header` (replacing what was there), or, with keep_until_step >= 0 (a resumed
  // run), keeps the rows whose first column (the step) is at most keep_until_step and drops the later
  // ones, which a stopped run logged after its last checkpoint and the resumed run will log again.
  CsvLog(const std::string& path, const std::vector<std::string>& header, int64_t keep_until_step = -1);
  // Empty strings are empty fields (a value not measured at that step).
  void row(const std::vector<std::string>& fields);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace mvgpt::apps
