#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace zenith::log {
namespace {

// -1 means "not fixed by the environment".
int environment_level() {
  static const int fixed = [] {
    const char* text = std::getenv("ZENITH_LOG");
    if (text == nullptr || *text == '\0') return -1;
    try {
      return static_cast<int>(parse(text));
    } catch (const Error& error) {
      std::fprintf(stderr, "[zenith] warn: %s; using warn\n", error.what());
      return static_cast<int>(LogLevel::Warn);
    }
  }();
  return fixed;
}

std::atomic<int> requested_level{static_cast<int>(LogLevel::Warn)};

}  // namespace

LogLevel parse(const std::string& text) {
  if (text == "debug") return LogLevel::Debug;
  if (text == "info") return LogLevel::Info;
  if (text == "warn" || text == "warning") return LogLevel::Warn;
  if (text == "error") return LogLevel::Error;
  if (text == "off") return LogLevel::Off;
  throw Error::mismatch("ZENITH_LOG", "one of debug, info, warn, error, off", "'" + text + "'");
}

LogLevel level() {
  int fixed = environment_level();
  return static_cast<LogLevel>(fixed >= 0 ? fixed : requested_level.load(std::memory_order_relaxed));
}

void request(LogLevel requested) { requested_level.store(static_cast<int>(requested)); }

void write(LogLevel at, const std::string& message) {
  static const char* names[] = {"debug", "info", "warn", "error", "off"};
  // One fprintf per line keeps lines whole when several threads log.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[zenith] %s: %s\n", names[static_cast<int>(at)], message.c_str());
}

}  // namespace zenith::log
