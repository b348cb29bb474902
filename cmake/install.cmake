# `cmake --install`: headers, libzenith, the CPU plugin (in lib/zenith/plugins, where libzenith
# looks), and a CMake package so that applications do find_package(Zenith) and link zenith::zenith.
include(CMakePackageConfigHelpers)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/zenith DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "*.in" EXCLUDE)
install(FILES ${ZENITH_GENERATED_INCLUDE_DIR}/zenith/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zenith)
set_target_properties(zenith_plugin_abi PROPERTIES EXPORT_NAME plugin_abi)
install(TARGETS zenith zenith_plugin_abi EXPORT ZenithTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ZenithTargets NAMESPACE zenith:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Zenith)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ZenithConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ZenithConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Zenith)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ZenithConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ZenithConfig.cmake ${CMAKE_BINARY_DIR}/ZenithConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Zenith)
