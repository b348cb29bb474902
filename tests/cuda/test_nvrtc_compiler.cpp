// CPU tests of zenith_nvrtc: NVRTC compiles without a GPU, so every test here runs anywhere the
// CUDA toolkit is installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_architecture.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "zenith/error.h"

namespace {

namespace fs = std::filesystem;
using zenith::cuda::CompiledBinary;
using zenith::cuda::CompileRequest;
using zenith::cuda::CompileTarget;
using zenith::cuda::ComputeCapability;
using zenith::cuda::choose_target;

const CompileTarget kSm90{90, true};

// One elementwise kernel per element type; `scale` makes sources differ for the concurrency test.
std::string elementwise_source(const std::string& type, const std::string& name, int scale = 2) {
  const std::string s = std::to_string(scale);
  std::string body;
  if (type == "float") body = "out[i] = a[i] * " + s + ".0f + 1.0f;";
  if (type == "__half") body = "out[i] = __float2half(__half2float(a[i]) * " + s + ".0f + 1.0f);";
  if (type == "__nv_bfloat16") body = "out[i] = __float2bfloat16(__bfloat162float(a[i]) * " + s + ".0f + 1.0f);";
  return "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
         "extern \"C\" __global__ void " + name + "(const " + type + "* a, " + type + "* out, int n) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) { " + body + " }\n"
         "}\n";
}

CompileRequest request_for(const std::string& source, const std::string& name, CompileTarget target = kSm90,
                           const std::string& dump_folder = "") {
  CompileRequest request;
  request.source = source;
  request.kernel_name = name;
  request.target = target;
  request.source_file_name = "zenith_k_" + name + ".cu";
  request.dump_folder = dump_folder;
  return request;
}

bool is_elf(const CompiledBinary& compiled) {
  return compiled.binary.size() > 4 && std::string(compiled.binary.data(), 4) == "\x7f" "ELF";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the zenith::Error that `compile` throws; fails the test when none is thrown.
std::string compile_error_message(const CompileRequest& request) {
  try {
    zenith::cuda::compile(request);
  } catch (const zenith::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "compiling " << request.source_file_name << " did not throw";
  return {};
}

class NvrtcCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("zenith-nvrtc-test-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  fs::path folder_;
};

// ---- choose_target ----------------------------------------------------------------------------

TEST(ChooseTarget, RealListIsNonEmptySortedAndHasSm90) {
  const auto archs = zenith::cuda::nvrtc_supported_architectures();
  ASSERT_FALSE(archs.empty());
  EXPECT_TRUE(std::is_sorted(archs.begin(), archs.end()));
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
}

TEST(ChooseTarget, H200GetsItsOwnCubin) {
  EXPECT_EQ(choose_target(ComputeCapability{9, 0}, zenith::cuda::nvrtc_supported_architectures()), kSm90);
}

TEST(ChooseTarget, FutureDeviceGetsPtxOfNewestListed) {
  const auto archs = zenith::cuda::nvrtc_supported_architectures();
  const CompileTarget target = choose_target(ComputeCapability{15, 0}, archs);
  EXPECT_EQ(target, (CompileTarget{archs.back(), false}));
  EXPECT_EQ(target.option(), "-arch=compute_" + std::to_string(archs.back()));
}

TEST(ChooseTarget, BetweenListedUsesBinaryCompatibleCubinOfSameMajor) {
  EXPECT_EQ(choose_target(ComputeCapability{8, 7}, {80, 86, 89, 90}), (CompileTarget{86, true}));
  // Unsorted input is fine.
  EXPECT_EQ(choose_target(ComputeCapability{8, 7}, {90, 86, 80, 89}), (CompileTarget{86, true}));
}

TEST(ChooseTarget, NoSameMajorFallsBackToPtxOfNewestBelow) {
  EXPECT_EQ(choose_target(ComputeCapability{9, 0}, {80, 86, 89, 100}), (CompileTarget{89, false}));
}

TEST(ChooseTarget, DeviceOlderThanNvrtcThrowsWithClearMessage) {
  try {
    choose_target(ComputeCapability{7, 0}, {75, 80});
    FAIL() << "expected zenith::Error";
  } catch (const zenith::Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("7.0"), std::string::npos) << message;
    EXPECT_NE(message.find("sm_75"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDA toolkit"), std::string::npos) << message;
  }
  EXPECT_THROW(choose_target(ComputeCapability{9, 0}, {}), zenith::Error);
}

TEST(ChooseTarget, OptionsAndNames) {
  EXPECT_EQ(kSm90.option(), "-arch=sm_90");
  EXPECT_EQ(kSm90.to_string(), "sm_90 (CUBIN)");
  EXPECT_EQ((CompileTarget{90, false}).option(), "-arch=compute_90");
  EXPECT_EQ((CompileTarget{90, false}).to_string(), "compute_90 (PTX)");
}

// ---- version and options ----------------------------------------------------------------------

TEST(NvrtcInfo, VersionIsCuda13OrLater) { EXPECT_GE(zenith::cuda::nvrtc_version(), 13000); }

TEST(NvrtcInfo, StandardOptionsStartWithArchAndIncludeFp16Headers) {
  const auto options = zenith::cuda::standard_options(kSm90);
  ASSERT_FALSE(options.empty());
  EXPECT_EQ(options.front(), "-arch=sm_90");
  EXPECT_NE(std::find(options.begin(), options.end(), "--std=c++17"), options.end());
  ASSERT_FALSE(zenith::cuda::cuda_include_folder().empty());
  EXPECT_TRUE(fs::exists(fs::path(zenith::cuda::cuda_include_folder()) / "cuda_bf16.h"));
  EXPECT_NE(std::find(options.begin(), options.end(), "-I" + zenith::cuda::cuda_include_folder()), options.end());
}

// ---- compile ----------------------------------------------------------------------------------

TEST_F(NvrtcCompile, ElementwiseKernelsGiveSm90Cubins) {
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"float", "scale_f32"}, {"__half", "scale_f16"}, {"__nv_bfloat16", "scale_bf16"}};
  for (const auto& [type, name] : variants) {
    const CompiledBinary compiled = zenith::cuda::compile(request_for(elementwise_source(type, name), name));
    EXPECT_EQ(compiled.kind, "cubin") << name;
    EXPECT_TRUE(is_elf(compiled)) << name;
    EXPECT_GT(compiled.milliseconds, 0.0) << name;
  }
}

TEST_F(NvrtcCompile, PtxTargetGivesNulTerminatedPtxText) {
  const CompiledBinary compiled =
      zenith::cuda::compile(request_for(elementwise_source("float", "ptx_f32"), "ptx_f32", CompileTarget{90, false}));
  EXPECT_EQ(compiled.kind, "ptx");
  ASSERT_GT(compiled.binary.size(), 2u);
  EXPECT_EQ(compiled.binary.back(), '\0');
  const std::string text(compiled.binary.data());
  EXPECT_EQ(text.rfind("//", 0), 0u);
  // NVRTC names the real architecture in .target even for -arch=compute_90.
  EXPECT_NE(text.find(".target sm_90"), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find(".entry ptx_f32"), std::string::npos);
}

TEST_F(NvrtcCompile, ExtraArchOptionDecidesTheOutputKind) {
  auto request = request_for(elementwise_source("float", "override_f32"), "override_f32");
  request.extra_options = {"-arch=compute_90"};
  EXPECT_EQ(zenith::cuda::compile(request).kind, "ptx");
}

TEST_F(NvrtcCompile, SourceIsWrittenToTheDumpFolder) {
  const std::string source = elementwise_source("__half", "dumped_f16");
  zenith::cuda::compile(request_for(source, "dumped_f16", kSm90, (folder_ / "nested").string()));
  const fs::path path = folder_ / "nested" / "zenith_k_dumped_f16.cu";
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(read_file(path), source);
  EXPECT_EQ(std::distance(fs::directory_iterator(folder_ / "nested"), fs::directory_iterator{}), 1)
      << "a temporary file was left behind";
}

TEST_F(NvrtcCompile, SyntaxErrorNamesTheWrittenFileAndQuotesTheLog) {
  const std::string source = "extern \"C\" __global__ void broken(float* a) {\n  a[0] = 1.0f\n}\n";
  const auto request = request_for(source, "broken", kSm90, folder_.string());
  const std::string message = compile_error_message(request);
  const fs::path path = folder_ / "zenith_k_broken.cu";
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("zenith_k_broken.cu(3): error"), std::string::npos) << message;
  EXPECT_NE(message.find("sm_90"), std::string::npos) << message;
  EXPECT_EQ(read_file(path), source) << "the source must be written even when the compile fails";
}

TEST_F(NvrtcCompile, SyntaxErrorWithoutDumpFolderSaysHowToGetTheSource) {
  const std::string message = compile_error_message(request_for("__global__ void broken( {", "broken"));
  EXPECT_NE(message.find("ZENITH_DUMP_DIR"), std::string::npos) << message;
  EXPECT_NE(message.find("zenith_k_broken.cu"), std::string::npos) << message;
  EXPECT_NE(message.find("error"), std::string::npos) << message;
}

TEST_F(NvrtcCompile, LongLogIsTrimmed) {
  std::string body;
  for (int i = 0; i < 200; ++i) body += "  undefined_name_" + std::to_string(i) + " = 1;\n";
  const std::string message =
      compile_error_message(request_for("extern \"C\" __global__ void noisy() {\n" + body + "}\n", "noisy"));
  EXPECT_LT(message.size(), 5000u);
  EXPECT_NE(message.find("undefined_name_0"), std::string::npos);
  EXPECT_NE(message.find("left out"), std::string::npos);
}

TEST_F(NvrtcCompile, UnwritableDumpFolderThrows) {
  fs::create_directories(folder_);
  std::ofstream(folder_ / "a_file") << "not a folder";
  const auto request =
      request_for(elementwise_source("float", "nowhere"), "nowhere", kSm90, (folder_ / "a_file" / "dumps").string());
  EXPECT_THROW(zenith::cuda::compile(request), zenith::Error);
}

TEST_F(NvrtcCompile, EightKernelsFromFourThreads) {
  constexpr int kKernels = 8;
  constexpr int kThreads = 4;
  const std::vector<std::string> types = {"float", "__half", "__nv_bfloat16", "float"};
  std::vector<CompiledBinary> results(kKernels);
  std::vector<std::string> errors(kKernels);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = t; k < kKernels; k += kThreads) {
        const std::string name = "concurrent_" + std::to_string(k);
        try {
          results[k] = zenith::cuda::compile(
              request_for(elementwise_source(types[k % types.size()], name, k + 2), name, kSm90, folder_.string()));
        } catch (const std::exception& error) {
          errors[k] = error.what();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int k = 0; k < kKernels; ++k) {
    EXPECT_EQ(errors[k], "") << "kernel " << k;
    EXPECT_TRUE(is_elf(results[k])) << "kernel " << k;
    EXPECT_TRUE(fs::exists(folder_ / ("zenith_k_concurrent_" + std::to_string(k) + ".cu"))) << "kernel " << k;
  }
}

}  // namespace
