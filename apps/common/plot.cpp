#include "apps/common/plot.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <mvgpt/util/atomic_file.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

bool gnuplot_available() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

std::string run_gnuplot(const std::string& script) {
  if (!gnuplot_available()) return "gnuplot is not installed (apt-get install gnuplot-nox)";
  const fs::path path = fs::temp_directory_path() / ("mvgpt_plot_" + std::to_string(::getpid()) + ".gp");
  util::write_file_atomic(path.string(), script);
  std::string output;
  if (std::FILE* p = ::popen(("gnuplot " + path.string() + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
    int status = ::pclose(p);
    if (status == 0) output.clear();
    else if (output.empty()) output = "gnuplot failed with status " + std::to_string(status);
  } else {
    output = "cannot run gnuplot";
  }
  std::error_code ec;
  fs::remove(path, ec);
  return output;
}

std::string gnuplot_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace mvgpt::apps
