# One precompiled <torch/torch.h> for every C++ target that builds against LibTorch, the library's
# own (core/CMakeLists.txt precompiles its narrower set) aside.
#
# Why: parsing <torch/torch.h> costs about 35 s of one core per translation unit (GCC 12, -O2), and
# the tests, the bench, the tools and the examples have some 150 of them; CI has 2 cores and a
# clean clone builds everything. Loaded from a precompiled header it costs about 13 s under GCC 12,
# most of it instantiating the headers' templates again, and about 3 s under Clang 14, which
# instantiates them once in the header (-fpch-instantiate-templates, CMake's default for Clang).
#
# A precompiled header serves only where it was made with the same code-generation settings
# (-fPIC against -fPIE, the optimization level, symbol visibility) and where every macro defined
# when it was made is defined alike (GoogleTest's GTEST_HAS_PTHREAD, for one). So there is one
# header per kind of target: position-independent library or executable, test code (-O0,
# tests/CMakeLists.txt) or not, with or without GoogleTest, hidden symbols (the plugins) or not.
# Each is made once, in a target of its own (zenith_pch_<kind>). A target one does not suit would
# build from the headers under GCC, with a -Winvalid-pch warning saying why, and fail under Clang.

set(ZENITH_PCH_DIR ${CMAKE_BINARY_DIR}/precompiled-torch)

# zenith_links_to(target names... OUTPUT var): whether target links, directly or through other
# targets, one of names.
function(zenith_links_to target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT" "NAMES")
  set(pending ${target})
  set(seen)
  while(pending)
    list(POP_FRONT pending item)
    # A static library's private dependencies reach its users as $<LINK_ONLY:...>.
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    # Before the TARGET test: an imported target (GoogleTest's) is seen only in its own folder.
    if(item IN_LIST arg_NAMES)
      set(${arg_OUTPUT} TRUE PARENT_SCOPE)
      return()
    endif()
    if(item IN_LIST seen OR item MATCHES "^\\$<" OR NOT TARGET ${item})
      continue()
    endif()
    list(APPEND seen ${item})
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      list(APPEND pending ${aliased})
      continue()
    endif()
    get_target_property(type ${item} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${item} LINK_LIBRARIES)
      if(direct)
        list(APPEND pending ${direct})
      endif()
    endif()
    get_target_property(interface ${item} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND pending ${interface})
    endif()
  endwhile()
  set(${arg_OUTPUT} FALSE PARENT_SCOPE)
endfunction()

# zenith_pch_holder(kind OUTPUT var): the target that makes the precompiled header of one kind,
# created on first use. kind is <pic|pie>-<optimized|test>-<gtest|plain>-<default|hidden>.
function(zenith_pch_holder kind)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT" "")
  set(holder zenith_pch_${kind})
  string(REPLACE "-" ";" parts ${kind})
  list(GET parts 0 code)
  list(GET parts 1 optimization)
  list(GET parts 2 framework)
  list(GET parts 3 symbols)
  if(NOT TARGET ${holder})
    # An object library builds the header and one empty file, and links nothing.
    set(anchor ${ZENITH_PCH_DIR}/${kind}.cpp)
    file(WRITE ${anchor} "// Makes zenith_pch_${kind}'s precompiled header (cmake/zenith_precompiled_torch.cmake).\n")
    add_library(${holder} OBJECT ${anchor})
    target_link_libraries(${holder} PRIVATE ${TORCH_LIBRARIES})
    if(code STREQUAL "pic")
      set_target_properties(${holder} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    else()
      # What CMake gives an executable under CMAKE_POSITION_INDEPENDENT_CODE.
      set_target_properties(${holder} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
      target_compile_options(${holder} PRIVATE -fPIE)
    endif()
    if(optimization STREQUAL "test")
      target_compile_options(${holder} PRIVATE -O0)
    endif()
    if(symbols STREQUAL "hidden")
      set_target_properties(${holder} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    endif()
    if(framework STREQUAL "gtest")
      find_package(GTest REQUIRED)  # its targets are seen only in the folders that looked for it
      target_link_libraries(${holder} PRIVATE GTest::gtest)
      target_precompile_headers(${holder} PRIVATE <gtest/gtest.h> <torch/torch.h>)
    else()
      target_precompile_headers(${holder} PRIVATE <torch/torch.h>)
    endif()
  endif()
  set(${arg_OUTPUT} ${holder} PARENT_SCOPE)
endfunction()

# zenith_collect_targets(dir OUTPUT var): the build-system targets of dir and its subdirectories.
function(zenith_collect_targets dir)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT" "")
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory ${subdirectories})
    zenith_collect_targets(${subdirectory} OUTPUT more)
    list(APPEND targets ${more})
  endforeach()
  set(${arg_OUTPUT} ${targets} PARENT_SCOPE)
endfunction()

# zenith_pch_kind(target OUTPUT var): the kind of precompiled header target can reuse, or nothing
# (not C++ over LibTorch, a header of its own, or settings no kind is made for).
function(zenith_pch_kind target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT" "")
  set(${arg_OUTPUT} "" PARENT_SCOPE)
  get_target_property(type ${target} TYPE)
  get_target_property(own ${target} PRECOMPILE_HEADERS)
  get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
  if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
     OR target MATCHES "^zenith_pch_" OR own OR reused)
    return()
  endif()
  zenith_links_to(${target} NAMES torch OUTPUT torch)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  get_target_property(visibility ${target} CXX_VISIBILITY_PRESET)
  get_target_property(inlines ${target} VISIBILITY_INLINES_HIDDEN)
  if(NOT torch OR (NOT type STREQUAL "EXECUTABLE" AND NOT pic AND NOT type MATCHES "^(SHARED|MODULE)_LIBRARY$")
     OR (visibility STREQUAL "hidden") AND NOT inlines OR (NOT visibility STREQUAL "hidden") AND inlines)
    return()  # no LibTorch, a library without -fPIC, or half-hidden symbols
  endif()
  set(code pic)
  if(type STREQUAL "EXECUTABLE")
    set(code pie)
  endif()
  get_target_property(options ${target} COMPILE_OPTIONS)
  set(optimization optimized)
  if("-O0" IN_LIST options)
    set(optimization test)
  endif()
  zenith_links_to(${target} NAMES GTest::gtest GTest::gtest_main GTest::GTest GTest::Main OUTPUT gtest)
  set(framework plain)
  if(gtest)
    set(framework gtest)
  endif()
  set(symbols default)
  if(visibility STREQUAL "hidden")
    set(symbols hidden)
  endif()
  set(${arg_OUTPUT} ${code}-${optimization}-${framework}-${symbols} PARENT_SCOPE)
endfunction()

# zenith_precompile_torch(): every C++ executable and library of this project that links LibTorch
# and has no precompiled header of its own reuses the header of its kind. Called once, after every
# target is defined.
function(zenith_precompile_torch)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
    return()  # the kinds above follow GCC's and Clang's rules
  endif()
  zenith_collect_targets(${CMAKE_SOURCE_DIR} OUTPUT targets)
  set(kinds)
  foreach(target ${targets})
    zenith_pch_kind(${target} OUTPUT kind)
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.(cpp|cc|cxx)$")
    if(NOT kind OR NOT sources)
      continue()
    endif()
    list(APPEND kinds ${kind})
    list(APPEND users_${kind} ${target})
    list(LENGTH sources n)
    if(NOT DEFINED sources_${kind})
      set(sources_${kind} 0)
    endif()
    math(EXPR sources_${kind} "${sources_${kind}} + ${n}")
  endforeach()
  # Making a header costs about two files' parsing: a kind with fewer files builds from the headers.
  list(REMOVE_DUPLICATES kinds)
  set(count 0)
  foreach(kind ${kinds})
    if(sources_${kind} LESS 3)
      continue()
    endif()
    zenith_pch_holder(${kind} OUTPUT holder)
    foreach(target ${users_${kind}})
      target_precompile_headers(${target} REUSE_FROM ${holder})
      math(EXPR count "${count} + 1")
    endforeach()
  endforeach()
  message(STATUS "Zenith: ${count} targets reuse a precompiled <torch/torch.h> (cmake/zenith_precompiled_torch.cmake)")
endfunction()
