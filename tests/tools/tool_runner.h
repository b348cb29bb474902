// Running a tool binary from a test and capturing what it prints and how it exits.
#pragma once

#include <string>
#include <vector>

namespace zenith::tool_tests {

/// Which of the tool's streams to capture.
enum class Streams { Both, Stdout, Stderr };

struct ToolRun {
  /// The exit status; 128 + the signal number when a signal killed it (a crash).
  int exit_code = -1;
  std::string output;
};

/// Runs `program` with `arguments` (each quoted for the shell) in an environment without the
/// ZENITH_* variables a developer may have set, plus `environment` ("NAME=value" entries).
ToolRun run_tool(const std::string& program, const std::vector<std::string>& arguments,
                 Streams streams = Streams::Both, const std::vector<std::string>& environment = {});

/// A fresh folder under the system's temporary folder; the caller removes it with remove_folder.
std::string make_temp_folder();

/// Removes a folder and everything in it. Not std::filesystem::remove_all: the LibTorch wheel
/// exports its own copy of that symbol, which crashes when a program linked to libtorch calls it.
void remove_folder(const std::string& path);

/// Writes `text` to `path`.
void write_text_file(const std::string& path, const std::string& text);

/// The lines of `text` that contain `needle`.
std::vector<std::string> lines_containing(const std::string& text, const std::string& needle);

}  // namespace zenith::tool_tests
