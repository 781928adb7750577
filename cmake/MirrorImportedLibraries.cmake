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

# Note [Pinned CUDA headers]: the CUDA toolkit's include folder may hold its own cudnn.h and
# nccl.h (NVIDIA's images put them there), and CUDA::cudart brings that folder as -isystem. The
# cuDNN and NCCL headers found above (the kit's pinned wheels, scripts/gpu_kit.sh) must win, so
# their folders go first, ahead of everything the linked targets bring; and the header versions
# read here are checked against the ones the compiler saw (src/cuda/discovery.cpp), so a build
# that still picks another copy fails instead of silently mismatching the library it loads.
function(mirror_link_cuda_libraries target)
  get_target_property(cudnn_inc MirrorDeps::cudnn INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(nccl_inc MirrorDeps::nccl INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(${target} SYSTEM BEFORE PRIVATE ${cudnn_inc} ${nccl_inc})
  target_link_libraries(${target} PRIVATE MirrorDeps::cudnn MirrorDeps::nccl CUDA::cudart
                                          CUDA::cublas)
endfunction()

# The version of a library header, as the library's own macro encodes it: cuDNN 9's CUDNN_VERSION
# (major * 10000 + minor * 100 + patch) or NCCL's NCCL_VERSION_CODE. Sets `out` (0 if unreadable).
function(mirror_header_version out header major minor patch)
  set(parts)
  foreach(name ${major} ${minor} ${patch})
    file(STRINGS "${header}" line REGEX "^#define ${name} +[0-9]+")
    string(REGEX MATCH "[0-9]+$" value "${line}")
    if(value STREQUAL "")
      set(${out} 0 PARENT_SCOPE)
      return()
    endif()
    list(APPEND parts ${value})
  endforeach()
  list(GET parts 0 x)
  list(GET parts 1 y)
  list(GET parts 2 z)
  math(EXPR code "${x} * 10000 + ${y} * 100 + ${z}")
  set(${out} ${code} PARENT_SCOPE)
endfunction()

# MirrorDeps::turbojpeg: libjpeg-turbo's TurboJPEG API (Debian: libturbojpeg0-dev), which decodes
# the JPEGs of image folders. Sets MirrorDeps_turbojpeg_FOUND.
macro(mirror_find_turbojpeg)
  mirror_import_library(MirrorDeps::turbojpeg turbojpeg.h turbojpeg "${ARGN}")
  # The libjpeg API of the same libjpeg-turbo: region decodes (jpeg_crop_scanline), which
  # TurboJPEG's API before version 3 lacks.
  mirror_import_library(MirrorDeps::jpeg jpeglib.h jpeg "${ARGN}")
  if(TARGET MirrorDeps::turbojpeg AND TARGET MirrorDeps::jpeg)
    set(MirrorDeps_turbojpeg_FOUND TRUE)
  else()
    set(MirrorDeps_turbojpeg_FOUND FALSE)
  endif()
endmacro()

# MirrorDeps::nvjpeg: nvJPEG for --decode gpu, beside the CUDA toolkit or where
# scripts/install_nvjpeg.sh puts NVIDIA's wheel (/opt/mirror/nvjpeg). Optional: without it the
# CUDA build says that --decode gpu is unavailable. Sets MirrorDeps_nvjpeg_FOUND.
macro(mirror_find_nvjpeg)
  set(_mirror_nvjpeg_hints ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR}
                           /opt/mirror/nvjpeg/include /opt/mirror/nvjpeg/lib ${ARGN})
  if(NOT TARGET MirrorDeps::nvjpeg)
    find_path(MIRROR_nvjpeg_INCLUDE_DIR NAMES nvjpeg.h HINTS ${_mirror_nvjpeg_hints})
    # The wheel ships only the versioned name.
    find_library(MIRROR_nvjpeg_LIBRARY NAMES nvjpeg libnvjpeg.so.13 libnvjpeg.so.12
                 HINTS ${_mirror_nvjpeg_hints})
    if(MIRROR_nvjpeg_INCLUDE_DIR AND MIRROR_nvjpeg_LIBRARY)
      add_library(MirrorDeps::nvjpeg UNKNOWN IMPORTED)
      set_target_properties(MirrorDeps::nvjpeg PROPERTIES
        IMPORTED_LOCATION "${MIRROR_nvjpeg_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${MIRROR_nvjpeg_INCLUDE_DIR}")
    endif()
  endif()
  if(TARGET MirrorDeps::nvjpeg)
    set(MirrorDeps_nvjpeg_FOUND TRUE)
  else()
    set(MirrorDeps_nvjpeg_FOUND FALSE)
  endif()
endmacro()
