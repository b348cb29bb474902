// Zenith's log: one line per event on stderr, filtered by a process-wide level.
#pragma once

#include <string>

#include <fmt/format.h>

#include "zenith/error.h"
#include "zenith/options.h"

namespace zenith::log {

/// The process-wide threshold: ZENITH_LOG when set, else the level the latest zenith::compile
/// asked for, else Warn.
LogLevel level();
/// Sets the threshold unless ZENITH_LOG fixed it.
void request(LogLevel requested);
/// Parses "debug", "info", "warn", "error", "off"; throws zenith::Error otherwise.
LogLevel parse(const std::string& text);
/// Writes "[zenith] <level>: <message>" when `at` passes the threshold.
void write(LogLevel at, const std::string& message);

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= LogLevel::Debug) write(LogLevel::Debug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= LogLevel::Info) write(LogLevel::Info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= LogLevel::Warn) write(LogLevel::Warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= LogLevel::Error) write(LogLevel::Error, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace zenith::log
