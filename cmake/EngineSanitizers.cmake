# Sanitizer and fuzzing builds (README, "Sanitizers and fuzzing"; tools/fuzz.sh drives both).
#
#   -DENGINE_SANITIZE=address,undefined   every library, tool and unit test of this build is compiled
#       and linked with -fsanitize=<list>. UBSan findings abort (-fno-sanitize-recover), so a test
#       that triggers undefined behaviour fails instead of printing a line nobody reads.
#   -DENGINE_FUZZ=ON (clang only)          also instruments every target for libFuzzer's coverage
#       (-fsanitize=fuzzer-no-link) and builds the targets in fuzz/; ENGINE_SANITIZE defaults to
#       address,undefined. One such build serves both the fuzzers and the sanitized unit tests.
#
# Flags go to every target of the directory (add_compile_options), so the precompiled header and
# the targets that reuse it are compiled with the same flags: REUSE_FROM stays valid.
# LibTorch, OpenCV and the other system libraries are not instrumented: ASan still sees every
# heap access of our code and every malloc/free (it intercepts them), UBSan only our code.
option(ENGINE_FUZZ "build the libFuzzer targets in fuzz/ (clang only; implies ENGINE_SANITIZE)" OFF)
set(ENGINE_SANITIZE "" CACHE STRING "comma-separated -fsanitize= list for every target, e.g. address,undefined")

if(ENGINE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ENGINE_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  if(NOT ENGINE_SANITIZE)
    set(ENGINE_SANITIZE "address,undefined")
  endif()
endif()

if(ENGINE_SANITIZE)
  message(STATUS "engine: building with -fsanitize=${ENGINE_SANITIZE}")
  # -O1 -g1: the speed ASan documents as reasonable, line tables for symbolized reports, and a
  # noticeably shorter build than -O2 on the 2-core machines this runs on.
  set(CMAKE_CXX_FLAGS_RELEASE "-O1 -g1")
  add_compile_options(-fsanitize=${ENGINE_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${ENGINE_SANITIZE})
endif()

if(ENGINE_FUZZ)
  # Coverage counters and comparison hooks only; the fuzz executables add libFuzzer's main
  # (-fsanitize=fuzzer at link time, fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
