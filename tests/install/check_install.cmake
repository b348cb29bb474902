# Installs the build into a fresh prefix, then configures, builds and runs an application that
# finds it with find_package(Zenith) and links zenith::zenith, as a LibTorch user would.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${what} failed (${result}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
run_step("install" ${CMAKE_COMMAND} --install ${ZENITH_BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# The prefix list goes through the environment: a ';' list would be split into two arguments here.
run_step("configure the consumer" ${CMAKE_COMMAND} -E env "CMAKE_PREFIX_PATH=${WORK_DIR}/prefix:${TORCH_PREFIX}"
  ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR})
run_step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("run the consumer" ${WORK_DIR}/build/consumer)
message(STATUS "${step_output}")
if(NOT step_output MATCHES "consumer: compiled result matches eager")
  message(FATAL_ERROR "the consumer ran but did not report a match:\n${step_output}")
endif()
