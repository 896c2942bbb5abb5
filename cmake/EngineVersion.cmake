# `engine --version`: the project version, the git revision and the build type, compiled into
# engine/core/version.cpp alone (a new revision recompiles one small file, not the tree). The
# revision is read at every build, not when CMake configures: a binary built after a commit, or
# from a tree with uncommitted changes ("<rev>-dirty"), says so, and so does every run_info.json it
# writes. A tree that is not a git checkout, or a machine without git, says "unknown".
find_package(Git QUIET)
set(ENGINE_REVISION_HEADER ${CMAKE_BINARY_DIR}/generated/engine_revision.h)
add_custom_target(engine_revision
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUT=${ENGINE_REVISION_HEADER}
          "-DGIT_EXECUTABLE=${GIT_EXECUTABLE}" -P ${CMAKE_SOURCE_DIR}/cmake/EngineRevision.cmake
  BYPRODUCTS ${ENGINE_REVISION_HEADER}
  VERBATIM)
set_source_files_properties(${CMAKE_SOURCE_DIR}/engine/core/version.cpp PROPERTIES
  COMPILE_DEFINITIONS "ENGINE_VERSION=\"${PROJECT_VERSION}\";ENGINE_BUILD_TYPE=\"${CMAKE_BUILD_TYPE}\""
  INCLUDE_DIRECTORIES ${CMAKE_BINARY_DIR}/generated
  SKIP_UNITY_BUILD_INCLUSION ON)
