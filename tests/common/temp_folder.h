// Removing the flat folders tests write (dumps) without std::filesystem::remove_all.
#pragma once

#include <filesystem>
#include <system_error>

namespace zenith::testing {

/// Removes `folder` and the files in it (not subfolders). libtorch.so exports a broken
/// std::filesystem::remove_all that the dynamic linker may bind to (it crashed test_fusion), so the
/// folder is emptied file by file.
inline void remove_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) std::filesystem::remove(entry.path(), ec);
  std::filesystem::remove(folder, ec);
}

}  // namespace zenith::testing
