// Draws for the seeded random generators (tests/common/random_*.h) from a std::mt19937_64, without
// std's distributions: the standard fixes mt19937_64's output but not theirs, so these give a
// seed the same program on every machine and standard library.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>

namespace zenith::testing {

class SeededDraws {
 public:
  explicit SeededDraws(std::mt19937_64& rng) : rng_(rng) {}

  /// The next raw draw (to seed something else from this stream).
  std::uint64_t next() { return rng_(); }
  /// Uniform in [0, n), n > 0 (the modulo's bias is of the order of n / 2^64).
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  /// Uniform in [0, 1), 53 bits.
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  /// True with probability p.
  bool chance(double p) { return unit() < p; }
  /// One of `items`, each as likely (repeat an item to weigh it).
  template <typename T>
  T pick(std::initializer_list<T> items) {
    return *(items.begin() + below(items.size()));
  }

 private:
  std::mt19937_64& rng_;
};

}  // namespace zenith::testing
