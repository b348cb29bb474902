# The libraries every part of Zenith builds against, found the same way by the main project and by
# the fuzzers' clang project (tests/fuzz).
find_package(Torch REQUIRED)
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  # Some machines ship the header without its CMake package.
  find_path(ZENITH_NLOHMANN_INCLUDE_DIR nlohmann/json.hpp REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${ZENITH_NLOHMANN_INCLUDE_DIR})
endif()
find_package(Threads REQUIRED)
find_package(OpenSSL COMPONENTS Crypto)  # SHA-256 for the kernel cache (backends/cuda)

# DLPack: Debian's libdlpack-dev here; on machines without it, a folder given by ZENITH_DLPACK_ROOT.
find_path(ZENITH_DLPACK_INCLUDE_DIR dlpack/dlpack.h
  HINTS ${ZENITH_DLPACK_ROOT} ${CMAKE_CURRENT_LIST_DIR}/../.carry/include ${TORCH_INSTALL_PREFIX}/include
  REQUIRED)

# fmt: the header-only fmt that ships inside the PyTorch wheel, on every machine, so that the
# development machine (Debian's fmt 9) and the GPU machine (no system fmt) build the same code.
find_path(ZENITH_FMT_INCLUDE_DIR fmt/format.h HINTS ${TORCH_INSTALL_PREFIX}/include NO_DEFAULT_PATH REQUIRED)
