#include "apps/common/csv_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <mvgpt/util/atomic_file.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

static std::string join(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + fields[i];
  return line + "\n";
}

CsvLog::CsvLog(const std::string& path, const std::vector<std::string>& header, int64_t keep_until_step)
    : path_(path) {
  std::string kept = join(header);
  std::error_code ec;
  if (keep_until_step >= 0 && fs::exists(path, ec)) {
    std::istringstream in(util::read_file(path));
    std::string line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      int64_t step = -1;
      try {
        step = std::stoll(line.substr(0, line.find(',')));
      } catch (const std::exception&) {
        continue;  // a torn last line
      }
      if (step <= keep_until_step) kept += line + "\n";
    }
  }
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  util::write_file_atomic(path, kept);
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error("CsvLog: cannot append to " + path);
}

void CsvLog::row(const std::vector<std::string>& fields) {
  out_ << join(fields);
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write to " + path_ + ": " + std::strerror(errno) + "; free space there");
}

}  // namespace mvgpt::apps
