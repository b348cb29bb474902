// When the JIT CUDA plugin launches the matrix-vector kernel as a programmatic dependent launch:
// from compute capability 9.0 unless ZENITH_PROGRAMMATIC_LAUNCH=0. Needs no GPU; that such
// launches compute what eager does is the gpu tests' (InferenceGraphs.
// ProductsOfOneTokenStartEarlyAndReadTheirInputsComplete, and the decoders of the zoo's CUDA tests).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backends/cuda/programmatic_launch.h"

namespace zenith::cuda {
namespace {

// Sets ZENITH_PROGRAMMATIC_LAUNCH for one scope and restores what was there.
class ScopedSetting {
 public:
  explicit ScopedSetting(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value) setenv(kName, value, 1);
    else unsetenv(kName);
  }
  ~ScopedSetting() {
    if (old_) setenv(kName, old_->c_str(), 1);
    else unsetenv(kName);
  }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  static constexpr const char* kName = "ZENITH_PROGRAMMATIC_LAUNCH";
  std::optional<std::string> old_;
};

TEST(ProgrammaticLaunch, OnFromComputeCapabilityNine) {
  ScopedSetting unset(nullptr);
  EXPECT_TRUE(programmatic_launch_enabled(9));
  EXPECT_TRUE(programmatic_launch_enabled(10));
  EXPECT_FALSE(programmatic_launch_enabled(8)) << "an older device cannot";
}

TEST(ProgrammaticLaunch, ZeroTurnsItOff) {
  {
    ScopedSetting off("0");
    EXPECT_FALSE(programmatic_launch_enabled(9));
  }
  {
    ScopedSetting on("1");
    EXPECT_TRUE(programmatic_launch_enabled(9));
    EXPECT_FALSE(programmatic_launch_enabled(8)) << "an older device cannot, whatever the setting";
  }
}

}  // namespace
}  // namespace zenith::cuda
