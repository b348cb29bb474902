# ZENITH_SANITIZE: builds Zenith's own code (the library, plugins, tests) with GCC's or Clang's
# sanitizers, e.g. -DZENITH_SANITIZE=address,undefined or -DZENITH_SANITIZE=thread
# (scripts/test --sanitize). LibTorch itself is not instrumented: what it does inside is not checked,
# but every call Zenith makes into it and every byte Zenith touches is.
set(ZENITH_SANITIZE "" CACHE STRING "Sanitizers for Zenith's code: address,undefined or thread (empty: none)")
if(ZENITH_SANITIZE)
  string(REPLACE "," ";" zenith_sanitizers "${ZENITH_SANITIZE}")
  foreach(sanitizer ${zenith_sanitizers})
    if(NOT sanitizer MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "ZENITH_SANITIZE: '${sanitizer}' is not one of address, undefined, thread, leak "
                          "(given: '${ZENITH_SANITIZE}')")
    endif()
  endforeach()
  if("thread" IN_LIST zenith_sanitizers AND ("address" IN_LIST zenith_sanitizers OR "leak" IN_LIST zenith_sanitizers))
    message(FATAL_ERROR "ZENITH_SANITIZE: thread cannot be combined with address or leak; build them apart")
  endif()
  # vptr: LibTorch's classes carry no UBSan type information, so every dynamic call into them
  # would be reported; UBSan stops at the first finding (-fno-sanitize-recover) so a test fails.
  set(zenith_sanitize_flags -fsanitize=${ZENITH_SANITIZE} -fno-omit-frame-pointer -g)
  if("undefined" IN_LIST zenith_sanitizers)
    list(APPEND zenith_sanitize_flags -fno-sanitize=vptr -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${zenith_sanitize_flags})
  add_link_options(-fsanitize=${ZENITH_SANITIZE})
  message(STATUS "Zenith: built with -fsanitize=${ZENITH_SANITIZE}")
endif()
