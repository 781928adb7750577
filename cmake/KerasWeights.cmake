# Keras's .weights.h5 files (src/train/keras_h5/): the HDF5 C library. Without it the build still
# works, and reading or writing such a file is a clear error naming the package to install
# (src/train/keras_h5/none.cpp); the conversions (src/train/keras_weights*.cpp) need no HDF5.
# Sets MIRROR_WITH_HDF5 (cache) for MirrorInstall.cmake: libmirror.a's users then link HDF5 too.
# Sources go to mirror_objects (Note [One set of objects]).
find_package(HDF5 COMPONENTS C)
set(MIRROR_KERAS_H5_DIR ${PROJECT_SOURCE_DIR}/src/train/keras_h5)
if(HDF5_FOUND)
  set(MIRROR_WITH_HDF5 ON CACHE INTERNAL "Keras .weights.h5 files are read and written")
  target_sources(mirror_objects PRIVATE ${MIRROR_KERAS_H5_DIR}/hdf5.cpp)
  set_source_files_properties(${MIRROR_KERAS_H5_DIR}/hdf5.cpp PROPERTIES
                              COMPILE_DEFINITIONS "${HDF5_C_DEFINITIONS}")
  # SYSTEM: HDF5's headers are not held to our warnings.
  target_include_directories(mirror_objects SYSTEM PRIVATE ${HDF5_C_INCLUDE_DIRS})
  foreach(target mirror mirror_static)
    target_link_libraries(${target} PRIVATE ${HDF5_C_LIBRARIES})
  endforeach()
else()
  set(MIRROR_WITH_HDF5 OFF CACHE INTERNAL "Keras .weights.h5 files are read and written")
  message(STATUS "HDF5 not found: Keras .weights.h5 files are unavailable (install libhdf5-dev)")
  target_sources(mirror_objects PRIVATE ${MIRROR_KERAS_H5_DIR}/none.cpp)
endif()
