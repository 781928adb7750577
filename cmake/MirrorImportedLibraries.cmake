# Imported targets for the libraries that ship no usable CMake package: oneDNN (Debian's
# dnnl-config.cmake requires OpenCL, which Mirror does not use), cuDNN and NCCL. Included by the
# build and by the installed MirrorConfig.cmake, so the exported targets name MirrorDeps::*
# and a consumer finds the same libraries the way the build did, with no path written by hand.
# `hints` are extra folders to look in (the installed config passes the build's folders).

function(mirror_import_library target header library hints)
  if(TARGET ${target})
    return()
  endif()
  string(MAKE_C_IDENTIFIER "MIRROR_${library}" var)
  find_path(${var}_INCLUDE_DIR NAMES ${header} HINTS ${hints})
  find_library(${var}_LIBRARY NAMES ${library} HINTS ${hints})
  if(${var}_INCLUDE_DIR AND ${var}_LIBRARY)
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${var}_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${${var}_INCLUDE_DIR}")
  endif()
endfunction()

# MirrorDeps::dnnl. Sets MirrorDeps_dnnl_FOUND.
macro(mirror_find_dnnl)
  mirror_import_library(MirrorDeps::dnnl dnnl.hpp dnnl "${ARGN}")
  if(TARGET MirrorDeps::dnnl)
    set(MirrorDeps_dnnl_FOUND TRUE)
  else()
    set(MirrorDeps_dnnl_FOUND FALSE)
  endif()
endmacro()

# MirrorDeps::cudnn and MirrorDeps::nccl, looked for beside the CUDA toolkit (find CUDAToolkit
# first). Sets MirrorDeps_cuda_libraries_FOUND when both are there.
macro(mirror_find_cuda_libraries)
  set(_mirror_cuda_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR}
                         ${CUDAToolkit_LIBRARY_ROOT}/lib ${ARGN})
  mirror_import_library(MirrorDeps::cudnn cudnn.h cudnn "${_mirror_cuda_hints}")
  mirror_import_library(MirrorDeps::nccl nccl.h nccl "${_mirror_cuda_hints}")
  if(TARGET MirrorDeps::cudnn AND TARGET MirrorDeps::nccl)
    set(MirrorDeps_cuda_libraries_FOUND TRUE)
  else()
    set(MirrorDeps_cuda_libraries_FOUND FALSE)
  endif()
endmacro()
