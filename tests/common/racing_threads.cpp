#include "common/racing_threads.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace zenith::testing {

int run_racing(int threads, int calls, std::chrono::seconds deadline, const RacingCall& call) {
  std::atomic<int> ready{0}, failures{0};
  std::vector<std::future<void>> running;
  for (int t = 0; t < threads; ++t) {
    running.push_back(std::async(std::launch::async, [&, t] {
      torch::NoGradGuard no_grad;
      auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + t);
      ++ready;
      while (ready.load() < threads) std::this_thread::yield();
      for (int i = 0; i < calls; ++i) {
        if (!call(t, i, generator)) ++failures;
      }
    }));
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (auto& thread : running) {
    if (thread.wait_until(until) != std::future_status::ready) {
      std::fprintf(stderr, "concurrent calls did not finish in %lld s: a deadlock\n",
                   static_cast<long long>(deadline.count()));
      std::_Exit(1);
    }
    thread.get();
  }
  return failures.load();
}

}  // namespace zenith::testing
