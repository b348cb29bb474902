#include "similar_lengths.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zenith::bench {
namespace {

double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  if (values.size() % 2 == 1) return *middle;
  return (*middle + *std::max_element(values.begin(), middle)) / 2;
}

}  // namespace

SlowestStep slowest_against_similar_lengths(const std::vector<double>& lengths, const std::vector<double>& ms) {
  if (lengths.size() != ms.size()) {
    throw std::invalid_argument("slowest_against_similar_lengths: one length per time expected");
  }
  SlowestStep slowest;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    std::vector<double> similar;
    for (std::size_t j = 0; j < ms.size(); ++j) {
      if (std::abs(lengths[j] - lengths[i]) * 10 <= lengths[i]) similar.push_back(ms[j]);
    }
    const double typical = median(similar);
    if (typical <= 0) continue;
    if (const double ratio = ms[i] / typical; ratio > slowest.ratio) slowest = {ratio, i};
  }
  return slowest;
}

}  // namespace zenith::bench
