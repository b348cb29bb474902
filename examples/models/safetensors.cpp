#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace zenith::models {

namespace {

// The file mapped read-only for as long as the tensors are being copied out of it: a 2 GB
// checkpoint is never read into a second buffer.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(fd >= 0, "safetensors: cannot open ", path, ": ", std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      const int error = errno;
      ::close(fd);
      TORCH_CHECK(false, "safetensors: cannot stat ", path, ": ", std::strerror(error));
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int error = errno;
      ::close(fd);
      TORCH_CHECK(data != MAP_FAILED, "safetensors: cannot map ", path, ": ", std::strerror(error));
      data_ = static_cast<const std::uint8_t*>(data);
    } else {
      ::close(fd);
    }
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

torch::ScalarType scalar_type(const std::string& dtype, const std::string& path, const std::string& name) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},  {"I32", torch::kInt32},
      {"I16", torch::kInt16},   {"I8", torch::kInt8},     {"U8", torch::kUInt8},
      {"BOOL", torch::kBool}};
  auto found = types.find(dtype);
  TORCH_CHECK(found != types.end(), "safetensors: ", path, ": tensor '", name, "' has dtype '", dtype,
              "', which this reader does not support (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  return found->second;
}

// Little-endian, whatever the host: the format fixes the byte order of the header length.
std::uint64_t header_length(const MappedFile& file) {
  TORCH_CHECK(file.size() >= 8, "safetensors: ", file.path(), " is ", file.size(),
              " bytes, shorter than the 8-byte header length");
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | file.data()[i];
  TORCH_CHECK(length <= file.size() - 8, "safetensors: ", file.path(), " declares a ", length,
              "-byte header but holds only ", file.size() - 8, " bytes after the length: truncated or not safetensors");
  return length;
}

torch::Tensor read_tensor(const MappedFile& file, std::size_t data_start, const std::string& name,
                          const nlohmann::json& entry, const torch::Device& device) {
  TORCH_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
              "safetensors: ", file.path(), ": tensor '", name, "' lacks dtype, shape or data_offsets");
  const auto type = scalar_type(entry.at("dtype").get<std::string>(), file.path(), name);
  const auto shape = entry.at("shape").get<std::vector<std::int64_t>>();
  const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
  TORCH_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1], "safetensors: ", file.path(), ": tensor '", name,
              "' has malformed data_offsets");
  std::uint64_t numel = 1;
  for (auto size : shape) {
    TORCH_CHECK(size >= 0, "safetensors: ", file.path(), ": tensor '", name, "' has a negative size");
    numel *= static_cast<std::uint64_t>(size);
  }
  const std::uint64_t bytes = numel * c10::elementSize(type);
  TORCH_CHECK(offsets[1] - offsets[0] == bytes, "safetensors: ", file.path(), ": tensor '", name, "' of shape ",
              c10::IntArrayRef(shape), " and dtype ", type, " needs ", bytes, " bytes but its range holds ",
              offsets[1] - offsets[0]);
  TORCH_CHECK(data_start + offsets[1] <= file.size(), "safetensors: ", file.path(), ": tensor '", name,
              "' ends at byte ", data_start + offsets[1], " beyond the end of the file (", file.size(), " bytes)");
  auto view = torch::from_blob(const_cast<std::uint8_t*>(file.data() + data_start + offsets[0]), shape,
                               torch::TensorOptions().dtype(type));
  // A copy in every case: the mapping goes away when loading returns.
  return device.is_cpu() ? view.clone() : view.to(device);
}

}  // namespace

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path, const torch::Device& device) {
  const MappedFile file(path);
  const std::uint64_t length = header_length(file);
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json header = nlohmann::json::parse(text, text + length, nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK(header.is_object(), "safetensors: ", path, ": the header is not a JSON object");
  const std::size_t data_start = 8 + length;
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings, nothing to load
    tensors.emplace(name, read_tensor(file, data_start, name, entry, device));
  }
  return tensors;
}

}  // namespace zenith::models
