// Least-squares line through (x, y) points and its coefficient of determination: how a step's
// latency grows with the sequence length, and how much of its variation that growth explains.
#pragma once

#include <vector>

namespace zenith::bench {

struct LineFit {
  double slope = 0;
  double intercept = 0;
  double r2 = 0;  ///< 1: the line explains every variation; 0: none of it
};

/// The fit of y against x; zeros for fewer than two distinct x.
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace zenith::bench
