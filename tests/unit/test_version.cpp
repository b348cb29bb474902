// The version a program sees: the macros of the headers it was built with and version() of the
// library it runs with, both from project(Zenith VERSION ...).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "zenith/compile.h"

namespace zenith {
namespace {

TEST(Version, TheLibraryAndTheHeadersAgree) {
  const auto v = version();
  EXPECT_EQ(v.major, ZENITH_VERSION_MAJOR);
  EXPECT_EQ(v.minor, ZENITH_VERSION_MINOR);
  EXPECT_EQ(v.patch, ZENITH_VERSION_PATCH);
  EXPECT_EQ(version_string(), ZENITH_VERSION_STRING);
  EXPECT_EQ(version_string(), std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch));
}

TEST(Version, TheSingleNumberComparesInVersionOrder) {
  EXPECT_EQ(ZENITH_VERSION, ZENITH_VERSION_MAJOR * 10000 + ZENITH_VERSION_MINOR * 100 + ZENITH_VERSION_PATCH);
  static_assert(ZENITH_VERSION_MINOR < 100 && ZENITH_VERSION_PATCH < 100, "the single number needs two digits each");
}

TEST(Version, TheChangelogHasAnEntryForThisVersion) {
  // CHANGELOG.md is kept from 0.1.0 on: a release without its entry fails here.
  const std::string changelog = ZENITH_SOURCE_DIR "/CHANGELOG.md";
  std::ifstream file(changelog);
  ASSERT_TRUE(file) << "no " << changelog;
  std::stringstream text_stream;
  text_stream << file.rdbuf();
  const std::string text = text_stream.str();
  EXPECT_NE(text.find("## " ZENITH_VERSION_STRING), std::string::npos)
      << changelog << " has no section \"## " ZENITH_VERSION_STRING "\"";
}

}  // namespace
}  // namespace zenith
