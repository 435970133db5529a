#pragma once
// Pictures through gnuplot (Debian's gnuplot-nox), when it is installed: the apps write CSV files
// that stand on their own and draw a PNG from them as a bonus.
#include <string>

namespace mvgpt::apps {

// True when a `gnuplot` executable is on the PATH.
bool gnuplot_available();

// Runs gnuplot on `script` (written to a temporary file). Returns "" on success, else gnuplot's
// output or the reason it could not run.
std::string run_gnuplot(const std::string& script);

// Quotes text for a gnuplot string literal ('...').
std::string gnuplot_quote(const std::string& text);

}  // namespace mvgpt::apps
