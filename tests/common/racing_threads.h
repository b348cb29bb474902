// Calls raced from several threads, started together and bounded by a deadline: the concurrency
// tests on the CPU (tests/unit/test_concurrent_calls.cpp) and on CUDA
// (tests/gpu/test_concurrent_calls_cuda.cpp) share it.
#pragma once

#include <chrono>
#include <functional>

#include <ATen/core/Generator.h>

namespace zenith::testing {

/// What a racing thread runs: `call(thread, index, generator)` for index 0 .. calls-1, with a CPU
/// generator of the thread's own (seeded by the thread's number); returns whether the call's result
/// was right.
using RacingCall = std::function<bool(int thread, int index, at::Generator& generator)>;

/// Runs `call` `calls` times on each of `threads` threads, all released at once, each under a
/// NoGradGuard. Returns the number of calls that returned false. A thread still running at
/// `deadline` is a deadlock: the process prints so and exits with status 1 (blocked threads cannot
/// be joined), failing the test instead of hanging it.
int run_racing(int threads, int calls, std::chrono::seconds deadline, const RacingCall& call);

}  // namespace zenith::testing
