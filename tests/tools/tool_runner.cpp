#include "tool_runner.h"

#include <ftw.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace zenith::tool_tests {
namespace {

std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A developer's ZENITH_PLUGIN_PATH or ZENITH_LOG must not change what a test sees.
const char* const kCleanEnvironment = "env -u ZENITH_PLUGIN_PATH -u ZENITH_BACKENDS -u ZENITH_LOG -u ZENITH_DUMP_DIR ";

const char* redirection(Streams streams) {
  switch (streams) {
    case Streams::Both: return " 2>&1";
    case Streams::Stdout: return " 2>/dev/null";
    case Streams::Stderr: return " 2>&1 >/dev/null";
  }
  return "";
}

std::string command_line(const std::string& program, const std::vector<std::string>& arguments, Streams streams,
                         const std::vector<std::string>& environment) {
  std::string command = kCleanEnvironment;
  for (const auto& entry : environment) command += shell_quote(entry) + " ";
  command += shell_quote(program);
  for (const auto& argument : arguments) command += " " + shell_quote(argument);
  return command + redirection(streams);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ToolRun run_tool(const std::string& program, const std::vector<std::string>& arguments, Streams streams,
                 const std::vector<std::string>& environment) {
  auto command = command_line(program, arguments, streams, environment);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + command);
  ToolRun run;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), n);
  run.exit_code = exit_code_of(pclose(pipe));
  return run;
}

std::string make_temp_folder() {
  const char* tmpdir = std::getenv("TMPDIR");
  auto pattern = std::string(tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp") + "/zenith-tools-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  return pattern;
}

void remove_folder(const std::string& path) {
  auto remove_entry = [](const char* entry, const struct stat*, int, struct FTW*) { return std::remove(entry); };
  nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<std::string> lines_containing(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

}  // namespace zenith::tool_tests
