# Run by the build (`cmake -P`, every build: the engine_revision target in EngineVersion.cmake): writes
# OUT, a header defining ENGINE_GIT_REVISION as the checkout's short revision, "-dirty" appended when
# tracked files differ from it, or "unknown" outside a git checkout. OUT is rewritten only when the
# text changes, so a build at the same revision recompiles nothing; a commit recompiles version.cpp.
# Inputs: SOURCE_DIR, OUT, GIT_EXECUTABLE (may be empty).
set(rev "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE head_rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(head_rc EQUAL 0 AND head)
    set(rev "${head}")
    # `git status` refreshes the index's file times first (diff-index alone calls a touched file changed).
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE status_rc ERROR_QUIET)
    if(status_rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND rev "-dirty")
    endif()
  endif()
endif()
set(text "// Written by cmake/EngineRevision.cmake at build time.\n#define ENGINE_GIT_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
