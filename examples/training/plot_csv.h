// Drawing an example's CSV with plot_training.py, the PNG next to the CSV.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace zenith::examples {

/// Runs plot_training.py on `csv` (writing the CSV's name with .png); when python3 or matplotlib
/// is missing, prints the command to run instead.
inline void plot_csv(const std::string& csv) {
  const auto png = std::filesystem::path(csv).replace_extension(".png").string();
  const std::string plot =
      std::string("python3 '") + ZENITH_EXAMPLE_SOURCE_DIR + "/plot_training.py' '" + csv + "' '" + png + "'";
  std::fflush(stdout);  // the plot script's lines after ours
  if (std::system(plot.c_str()) != 0) {
    std::printf("  no PNG: the plot needs python3 with matplotlib; run it yourself with:\n  %s\n", plot.c_str());
  }
}

}  // namespace zenith::examples
