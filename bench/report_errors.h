// A benchmark's main: runs it and turns an exception into one line on stderr and exit status 1,
// with LibTorch's message rather than its backtrace.
#pragma once

#include <cstdio>
#include <exception>

#include <c10/util/Exception.h>

namespace zenith::bench {

template <typename Run>
int run_reporting_errors(int argc, char** argv, Run run) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.what_without_backtrace());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.what());
  }
  return 1;
}

}  // namespace zenith::bench
