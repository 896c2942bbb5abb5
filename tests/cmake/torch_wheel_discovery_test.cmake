# cmake -DENGINE_SOURCE_DIR=<repo> -DWORK_DIR=<scratch> -P torch_wheel_discovery_test.cmake
#
# Runs cmake/EngineTorchDeps.cmake's discovery against fake site-packages laid out like the pip
# wheels of the GPU machine (torch with its CMake files, nvidia-nccl-cu12 / -cu13), through the same
# code it uses there: python3's importlib finds the packages, find_path/find_library the files.
# Fails with a message naming the first wrong result.
cmake_minimum_required(VERSION 3.18)
include("${ENGINE_SOURCE_DIR}/cmake/EngineTorchDeps.cmake")

find_program(PYTHON NAMES python3 python REQUIRED)
set(W "${WORK_DIR}")
file(REMOVE_RECURSE "${W}")

function(touch path)
  get_filename_component(dir "${path}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${path}" "")
endfunction()

function(expect what actual expected)
  if(NOT "${actual}" STREQUAL "${expected}")
    message(FATAL_ERROR "${what}: got '${actual}', expected '${expected}'")
  endif()
  message(STATUS "ok: ${what} = ${actual}")
endfunction()

function(forget)  # find_path/find_library do not search again while the variable holds a path
  foreach(v ENGINE_NCCL_INCLUDE_DIR ENGINE_NCCL_LIBRARY ENGINE_GLOO_INCLUDE_DIR)
    unset(${v} PARENT_SCOPE)
    unset(${v} CACHE)
  endforeach()
endfunction()

# --- site A: torch 2.x wheel without Gloo headers, nvidia-nccl-cu12 (nvidia/ a namespace package)
set(A "${W}/siteA")
touch("${A}/torch/__init__.py")
touch("${A}/torch/share/cmake/Torch/TorchConfig.cmake")
touch("${A}/torch/include/torch/torch.h")
touch("${A}/torch/include/fmt/format.h")  # the fmt 12 the engine must not depend on
touch("${A}/nvidia/nccl/include/nccl.h")
touch("${A}/nvidia/nccl/lib/libnccl.so.2")

set(ENV{PYTHONPATH} "${A}")
engine_python_package_dirs("${PYTHON}" torch_dir nvidia_dirs)
expect("python's torch package" "${torch_dir}" "${A}/torch")
list(FIND nvidia_dirs "${A}/nvidia" at)
if(at LESS 0)
  message(FATAL_ERROR "python's nvidia package folders '${nvidia_dirs}' miss ${A}/nvidia")
endif()
message(STATUS "ok: python's nvidia folders include ${A}/nvidia")

engine_torch_cmake_prefix("${torch_dir}" prefix)
expect("cmake prefix of the wheel" "${prefix}" "${A}/torch/share/cmake")
engine_torch_is_wheel("${torch_dir}" wheel)
expect("wheel torch is a wheel" "${wheel}" "TRUE")
engine_torch_is_wheel("/usr" wheel)
expect("system LibTorch is a wheel" "${wheel}" "FALSE")

engine_find_wheel_deps("${torch_dir}" "${nvidia_dirs}")
expect("nccl.h folder (cu12 layout)" "${ENGINE_NCCL_INCLUDE_DIR}" "${A}/nvidia/nccl/include")
expect("libnccl (cu12 layout)" "${ENGINE_NCCL_LIBRARY}" "${A}/nvidia/nccl/lib/libnccl.so.2")
expect("Gloo headers of a wheel without them" "${ENGINE_GLOO_INCLUDE_DIR}" "ENGINE_GLOO_INCLUDE_DIR-NOTFOUND")

# The same wheel once it ships Gloo: found in torch/include, nowhere else.
touch("${A}/torch/include/gloo/transport/device.h")
forget()
engine_find_wheel_deps("${torch_dir}" "${nvidia_dirs}")
expect("Gloo headers of the wheel" "${ENGINE_GLOO_INCLUDE_DIR}" "${A}/torch/include")

# A value the user set wins over discovery.
forget()
set(ENGINE_NCCL_INCLUDE_DIR "${W}/custom/include")
engine_find_wheel_deps("${torch_dir}" "${nvidia_dirs}")
expect("user-set nccl.h folder" "${ENGINE_NCCL_INCLUDE_DIR}" "${W}/custom/include")

# The same wheel through a real configure (a compiler-less project): ENGINE_TORCH_FROM_PYTHON finds
# the stub TorchConfig via python, and the discovered folders and libnccl land on the torch target.
file(WRITE "${A}/torch/share/cmake/Torch/TorchConfig.cmake" [=[
get_filename_component(TORCH_INSTALL_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
add_library(torch INTERFACE IMPORTED)
set(TORCH_LIBRARIES torch)
]=])
file(WRITE "${W}/project/CMakeLists.txt" [=[
cmake_minimum_required(VERSION 3.18)
project(fake_wheel_consumer NONE)
include("${ENGINE_SOURCE_DIR}/cmake/EngineTorchDeps.cmake")
engine_before_torch()
find_package(Torch REQUIRED)
engine_after_torch()
get_target_property(inc torch INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(libs torch INTERFACE_LINK_LIBRARIES)
message(STATUS "torch from ${TORCH_INSTALL_PREFIX}; includes ${inc}; links ${libs}")
foreach(want "${SITE}/nvidia/nccl/include" "${SITE}/torch/include")
  if(NOT want IN_LIST inc)
    message(FATAL_ERROR "torch target lacks include folder ${want}: ${inc}")
  endif()
endforeach()
if(NOT "${SITE}/nvidia/nccl/lib/libnccl.so.2" IN_LIST libs)
  message(FATAL_ERROR "torch target does not link libnccl: ${libs}")
endif()
]=])
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${W}/project" -B "${W}/project/build" -DENGINE_SOURCE_DIR=${ENGINE_SOURCE_DIR}
          -DSITE=${A} -DENGINE_TORCH_FROM_PYTHON=ON -DENGINE_PYTHON=${PYTHON}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring a project against the fake wheel failed:\n${out}\n${err}")
endif()
string(REGEX MATCH "torch from [^\n]*" line "${out}")
message(STATUS "ok: configure against the fake wheel: ${line}")

# --- site B: CUDA 13 wheels grouped under nvidia/cu13, nvidia/ a regular package, found only
# through python (not next to torch: torch sits in site A).
set(B "${W}/siteB")
touch("${B}/nvidia/__init__.py")
touch("${B}/nvidia/cu13/include/nccl.h")
touch("${B}/nvidia/cu13/lib/libnccl.so.2")
file(REMOVE_RECURSE "${A}/nvidia")
set(ENV{PYTHONPATH} "${A}:${B}")
engine_python_package_dirs("${PYTHON}" torch_dir nvidia_dirs)
expect("python's torch package (two sites)" "${torch_dir}" "${A}/torch")
forget()
engine_find_wheel_deps("${torch_dir}" "${nvidia_dirs}")
expect("nccl.h folder (cu13 layout)" "${ENGINE_NCCL_INCLUDE_DIR}" "${B}/nvidia/cu13/include")
expect("libnccl (cu13 layout)" "${ENGINE_NCCL_LIBRARY}" "${B}/nvidia/cu13/lib/libnccl.so.2")

# --- no NCCL wheel anywhere: NOTFOUND (the engine then builds its "no NCCL" stub), and a torch
# folder without CMake files gives no prefix.
set(C "${W}/siteC")
touch("${C}/torch/__init__.py")
set(ENV{PYTHONPATH} "${C}")
engine_python_package_dirs("${PYTHON}" torch_dir nvidia_dirs)
expect("python's torch package (site C)" "${torch_dir}" "${C}/torch")
forget()
engine_find_wheel_deps("${torch_dir}" "")
expect("nccl.h folder without a wheel" "${ENGINE_NCCL_INCLUDE_DIR}" "ENGINE_NCCL_INCLUDE_DIR-NOTFOUND")
engine_torch_cmake_prefix("${torch_dir}" prefix)
expect("cmake prefix of a torch without CMake files" "${prefix}" "")

file(REMOVE_RECURSE "${W}")
message(STATUS "torch wheel discovery: all checks passed")
