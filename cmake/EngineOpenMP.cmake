# EngineOpenMP.cmake: the engine's own kernels run on LibTorch's intra-op threads.
#
# LibTorch's at::parallel_for is a header template. Where LibTorch parallelises with OpenMP
# (AT_PARALLEL_OPENMP in ATen/Config.h: Debian's 1.13 and 2.6, the pip wheels), its body is a
# `#pragma omp parallel` compiled inside the caller's translation unit. Compiled without -fopenmp,
# the pragma is dropped and every engine kernel that splits its work with at::parallel_for (packed
# GEMMs, convolutions, LayerNorm, AdamW...) runs on one thread whatever accelerator.threads says,
# while LibTorch's own ops use them all. So every engine TU compiles with -fopenmp, and links the
# OpenMP runtime LibTorch itself loads: one thread pool and one at::set_num_threads for both
# (a second runtime would size its own pool and see no parallel region of the other). A pip wheel
# bundles its libgomp (torch/lib/libgomp-<hash>.so.1); elsewhere it is the compiler's.
#
# engine_torch_openmp(<out>): after find_package(Torch). Adds -fopenmp to every C++ compile of this
# directory (the precompiled header included: it must see the same flags as its users) and sets
# <out> to the runtime to link, or "" where LibTorch does not use OpenMP.
function(engine_torch_openmp out)
  set(${out} "" PARENT_SCOPE)
  find_file(ENGINE_ATEN_CONFIG ATen/Config.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(NOT ENGINE_ATEN_CONFIG)
    message(WARNING "ATen/Config.h not found in ${TORCH_INCLUDE_DIRS}: engine kernels stay on one thread")
    return()
  endif()
  file(STRINGS "${ENGINE_ATEN_CONFIG}" openmp REGEX "^#define AT_PARALLEL_OPENMP 1")
  if(NOT openmp)
    message(STATUS "LibTorch does not parallelise with OpenMP: no -fopenmp")
    return()
  endif()
  set(runtime "")
  if(TORCH_INSTALL_PREFIX)
    file(GLOB runtime "${TORCH_INSTALL_PREFIX}/lib/libgomp*.so*")
  endif()
  if(runtime)
    list(GET runtime 0 runtime)  # a wheel's own copy
  else()
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    set(runtime OpenMP::OpenMP_CXX)
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fopenmp>)
  message(STATUS "OpenMP for engine kernels: -fopenmp, runtime ${runtime}")
  set(${out} "${runtime}" PARENT_SCOPE)
endfunction()
