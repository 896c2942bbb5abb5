# `engine --version`: the project version, the git revision and the build type, as compile
# definitions of engine/core/version.cpp alone (a new revision recompiles one file, not the tree).
# The revision is read when CMake configures (tools/setup.sh configures on every run); a tree that
# is not a git checkout, or a machine without git, says "unknown".
find_package(Git QUIET)
set(ENGINE_GIT_REVISION "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${CMAKE_SOURCE_DIR} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE _engine_rev OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _engine_rev_rc ERROR_QUIET)
  if(_engine_rev_rc EQUAL 0 AND _engine_rev)
    set(ENGINE_GIT_REVISION "${_engine_rev}")
  endif()
endif()
set_source_files_properties(${CMAKE_SOURCE_DIR}/engine/core/version.cpp PROPERTIES COMPILE_DEFINITIONS
  "ENGINE_VERSION=\"${PROJECT_VERSION}\";ENGINE_GIT_REVISION=\"${ENGINE_GIT_REVISION}\";ENGINE_BUILD_TYPE=\"${CMAKE_BUILD_TYPE}\"")
