# EngineTorchDeps.cmake: what find_package(Torch) leaves out when LibTorch comes from a pip wheel.
#
# Debian's libtorch-dev 1.13 (CPU) needs none of this: its headers, Gloo's and fmt's all sit in
# /usr/include. A pip torch 2.x wheel (site-packages/torch, CUDA, NCCL) differs in three ways that
# each break the first build on a GPU machine:
#   - <nccl.h> (included by ProcessGroupNCCL.hpp) lives in another wheel, nvidia-nccl-cu1x
#     (site-packages/nvidia/nccl/include), not in torch/include;
#   - the Gloo headers may be missing (torch/include/gloo); the engine then builds without Gloo
#     (engine/accelerator/gloo_collectives.cpp checks with __has_include);
#   - torch's cuda.cmake may link CUDA::nvToolsExt, which CUDA 12.9+ no longer ships.
# The functions below are plain CMake (no targets) where they can be, so that
# tests/cmake/torch_wheel_discovery_test.cmake runs them in script mode against a fake wheel.
#
# Cache variables (set them by hand to override what is discovered):
#   ENGINE_TORCH_FROM_PYTHON  ON: add python3's torch (torch/share/cmake) to CMAKE_PREFIX_PATH
#   ENGINE_PYTHON             the interpreter asked where the wheels are (default: python3)
#   ENGINE_NCCL_INCLUDE_DIR   the folder holding nccl.h
#   ENGINE_NCCL_LIBRARY       libnccl.so(.2), linked when nccl.h was found
#   ENGINE_GLOO_INCLUDE_DIR   the folder holding gloo/transport/device.h

# Sets <out_torch> to the torch package folder and <out_nvidia> to the list of `nvidia` package
# folders (a namespace package: may span several site-packages) that `python` imports. Uses
# importlib's find_spec, which locates packages without running them: importing torch takes
# seconds and needs the CUDA libraries. Either comes back empty when the package is absent.
function(engine_python_package_dirs python out_torch out_nvidia)
  set(torch_dir "")
  set(nvidia_dirs "")
  if(python)
    execute_process(
      COMMAND "${python}" -c [=[
import importlib.util
for name in ("torch", "nvidia"):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec else []
    print(name + "=" + ";".join(dirs))
]=]
      OUTPUT_VARIABLE out
      RESULT_VARIABLE rc
      ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" lines "${out}")
      foreach(line IN LISTS lines)
        if(line MATCHES "^torch=(.+)$")
          list(GET CMAKE_MATCH_1 0 torch_dir)  # a regular package: one folder
        elseif(line MATCHES "^nvidia=(.*)$")
          set(nvidia_dirs "${CMAKE_MATCH_1}")
        endif()
      endforeach()
    endif()
  endif()
  set(${out_torch} "${torch_dir}" PARENT_SCOPE)
  set(${out_nvidia} "${nvidia_dirs}" PARENT_SCOPE)
endfunction()

# Sets <out> to the folder to add to CMAKE_PREFIX_PATH for torch package folder `torch_dir`
# (what torch.utils.cmake_prefix_path prints), or "" when it holds no TorchConfig.cmake.
function(engine_torch_cmake_prefix torch_dir out)
  set(prefix "")
  if(torch_dir AND EXISTS "${torch_dir}/share/cmake/Torch/TorchConfig.cmake")
    set(prefix "${torch_dir}/share/cmake")
  endif()
  set(${out} "${prefix}" PARENT_SCOPE)
endfunction()

# True (in <out>) when `install_prefix` (TorchConfig's TORCH_INSTALL_PREFIX) is a Python package,
# i.e. LibTorch came from a pip wheel rather than a system or standalone LibTorch.
function(engine_torch_is_wheel install_prefix out)
  if(install_prefix AND EXISTS "${install_prefix}/__init__.py")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Finds nccl.h, libnccl and the Gloo headers of a pip torch at `torch_dir`, with `nvidia_dirs`
# the nvidia package folders (the torch folder's sibling `nvidia` is tried too). Looks only inside
# the wheels: a system NCCL or Gloo is on the default include path anyway, and a Gloo from another
# source than torch's own build would not match the structures libtorch was compiled with.
# Results go to the cache variables ENGINE_NCCL_INCLUDE_DIR, ENGINE_NCCL_LIBRARY and
# ENGINE_GLOO_INCLUDE_DIR (-NOTFOUND when absent; a value set by the user is kept).
function(engine_find_wheel_deps torch_dir nvidia_dirs)
  set(hints ${nvidia_dirs})
  if(torch_dir)
    get_filename_component(site "${torch_dir}" DIRECTORY)
    list(APPEND hints "${site}/nvidia")
  endif()
  # nvidia-nccl-cu12 installs nvidia/nccl/{include,lib}; CUDA 13 wheels may group under nvidia/cu13.
  find_path(ENGINE_NCCL_INCLUDE_DIR nccl.h HINTS ${hints}
            PATH_SUFFIXES nccl/include cu13/include cu12/include include
            DOC "folder holding nccl.h (the nvidia-nccl wheel's include/)" NO_DEFAULT_PATH)
  find_library(ENGINE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${hints}
               PATH_SUFFIXES nccl/lib cu13/lib cu12/lib lib
               DOC "libnccl of the nvidia-nccl wheel" NO_DEFAULT_PATH)
  set(gloo_hints "")
  if(torch_dir)
    set(gloo_hints "${torch_dir}/include")
  endif()
  find_path(ENGINE_GLOO_INCLUDE_DIR gloo/transport/device.h HINTS ${gloo_hints}
            DOC "folder holding gloo/ (torch/include of the wheel when it ships Gloo)" NO_DEFAULT_PATH)
  # Script mode (the test) has no cache: hand the results up explicitly.
  foreach(v ENGINE_NCCL_INCLUDE_DIR ENGINE_NCCL_LIBRARY ENGINE_GLOO_INCLUDE_DIR)
    set(${v} "${${v}}" PARENT_SCOPE)
  endforeach()
endfunction()

# Before find_package(Torch): point CMake at python3's torch when asked, and give torch's
# cuda.cmake the CUDA::nvToolsExt it may link. CUDA 12.9 dropped libnvToolsExt (NVTX 3 is
# header-only), so FindCUDAToolkit no longer defines the target and the generate step fails with
# "target CUDA::nvToolsExt not found"; the engine calls no NVTX function, so an empty target does.
macro(engine_before_torch)
  option(ENGINE_TORCH_FROM_PYTHON
         "Build against the torch that python3 imports (pip wheel) instead of the system LibTorch" OFF)
  find_program(ENGINE_PYTHON NAMES python3 python DOC "interpreter asked where the torch/nvidia wheels are")
  set(ENGINE_WHEEL_TORCH_DIR "")
  set(ENGINE_WHEEL_NVIDIA_DIRS "")
  if(ENGINE_TORCH_FROM_PYTHON)
    engine_python_package_dirs("${ENGINE_PYTHON}" ENGINE_WHEEL_TORCH_DIR ENGINE_WHEEL_NVIDIA_DIRS)
    engine_torch_cmake_prefix("${ENGINE_WHEEL_TORCH_DIR}" _engine_torch_prefix)
    if(NOT _engine_torch_prefix)
      message(FATAL_ERROR "ENGINE_TORCH_FROM_PYTHON is ON but ${ENGINE_PYTHON} finds no torch with CMake files "
                          "(torch/share/cmake/Torch): pip install torch, set ENGINE_PYTHON to the interpreter "
                          "that has it, or turn the option off to use the system LibTorch")
    endif()
    list(PREPEND CMAKE_PREFIX_PATH "${_engine_torch_prefix}")
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND NOT TARGET CUDA::nvToolsExt)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    message(STATUS "CUDA ${CUDAToolkit_VERSION} has no libnvToolsExt: CUDA::nvToolsExt is an empty stand-in")
  endif()
endmacro()

# After find_package(Torch): for a pip wheel, add nccl.h's and Gloo's folders to the `torch`
# target (so every target that links ${TORCH_LIBRARIES}, and the shared precompiled header, sees
# the same include path) and link libnccl, which NCCLUtils.hpp's inline code may call.
macro(engine_after_torch)
  engine_torch_is_wheel("${TORCH_INSTALL_PREFIX}" _engine_torch_wheel)
  if(_engine_torch_wheel)
    if(NOT ENGINE_WHEEL_TORCH_DIR)
      engine_python_package_dirs("${ENGINE_PYTHON}" _engine_unused ENGINE_WHEEL_NVIDIA_DIRS)
    endif()
    get_filename_component(_engine_torch_dir "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
    engine_find_wheel_deps("${_engine_torch_dir}" "${ENGINE_WHEEL_NVIDIA_DIRS}")
  endif()
  foreach(_engine_dep NCCL GLOO)
    if(ENGINE_${_engine_dep}_INCLUDE_DIR AND TARGET torch)
      set_property(TARGET torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${ENGINE_${_engine_dep}_INCLUDE_DIR}")
      message(STATUS "${_engine_dep} headers: ${ENGINE_${_engine_dep}_INCLUDE_DIR}")
    elseif(_engine_torch_wheel)
      message(STATUS "${_engine_dep} headers: not in the wheels; the engine builds without ${_engine_dep} unless "
                     "they are on the system include path (set ENGINE_${_engine_dep}_INCLUDE_DIR to override)")
    endif()
  endforeach()
  if(ENGINE_NCCL_INCLUDE_DIR AND ENGINE_NCCL_LIBRARY AND TARGET torch)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${ENGINE_NCCL_LIBRARY}")
  endif()
endmacro()
