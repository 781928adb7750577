# Installation: headers, libmirror.so / libmirror.a, the CMake package (find_package(Mirror)),
# mirror.pc for pkg-config, launch/mirrorrun and its README. The programs install themselves
# (examples/CMakeLists.txt).
include(CMakePackageConfigHelpers)

set(MIRROR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Mirror)

# The installed shared library finds its non-system dependencies (e.g. the CUDA libraries)
# through the RPATH of the folders it was linked from.
set_target_properties(mirror PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(mirror_static PROPERTIES EXPORT_NAME mirror_static)
install(TARGETS mirror mirror_static EXPORT MirrorTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mirror DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT MirrorTargets NAMESPACE Mirror:: DESTINATION ${MIRROR_CMAKE_DIR})

# Where the build found oneDNN / cuDNN / NCCL: the installed config looks there too.
set(MIRROR_DEPENDENCY_HINTS "")
foreach(dep MirrorDeps::dnnl MirrorDeps::turbojpeg MirrorDeps::jpeg MirrorDeps::cudnn MirrorDeps::nccl
            MirrorDeps::nvjpeg)
  if(TARGET ${dep})
    get_target_property(location ${dep} IMPORTED_LOCATION)
    get_target_property(include ${dep} INTERFACE_INCLUDE_DIRECTORIES)
    get_filename_component(folder ${location} DIRECTORY)
    list(APPEND MIRROR_DEPENDENCY_HINTS ${folder} ${include})
  endif()
endforeach()
list(REMOVE_DUPLICATES MIRROR_DEPENDENCY_HINTS)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/MirrorConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/MirrorConfig.cmake
                              INSTALL_DESTINATION ${MIRROR_CMAKE_DIR})
# 0.x: a minor version may change the API, so 0.2 accepts 0.2.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/MirrorConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/MirrorConfig.cmake ${PROJECT_BINARY_DIR}/MirrorConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/MirrorImportedLibraries.cmake
        DESTINATION ${MIRROR_CMAKE_DIR})

# pkg-config: prefix relative to the .pc file, so `cmake --install --prefix P` anywhere works.
file(RELATIVE_PATH MIRROR_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MIRROR_PC_TO_PREFIX "${MIRROR_PC_TO_PREFIX}")
set(MIRROR_PC_LIBS_PRIVATE "-ldnnl -lz -lpng16 -lturbojpeg")
foreach(flag ${OpenMP_CXX_FLAGS})
  string(APPEND MIRROR_PC_LIBS_PRIVATE " ${flag}")
endforeach()
string(APPEND MIRROR_PC_LIBS_PRIVATE " ${CMAKE_THREAD_LIBS_INIT}")
if(MIRROR_WITH_TENSORBOARD)
  string(APPEND MIRROR_PC_LIBS_PRIVATE " -lprotobuf-lite")
endif()
if(MIRROR_WITH_HDF5)
  foreach(lib ${HDF5_C_LIBRARIES})
    string(APPEND MIRROR_PC_LIBS_PRIVATE " ${lib}")
  endforeach()
endif()
if(MIRROR_WITH_CUDA)
  string(APPEND MIRROR_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas")
  foreach(dep MirrorDeps::cudnn MirrorDeps::nccl MirrorDeps::nvjpeg)
    if(NOT TARGET ${dep})
      continue()
    endif()
    get_target_property(location ${dep} IMPORTED_LOCATION)
    string(APPEND MIRROR_PC_LIBS_PRIVATE " ${location}")
  endforeach()
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/mirror.pc.in ${PROJECT_BINARY_DIR}/mirror.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mirror.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(PROGRAMS ${PROJECT_SOURCE_DIR}/launch/mirrorrun DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/launch/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
        RENAME mirrorrun.md)
# The user documentation beside the library, laid out as in the repository so that the README's
# links (docs/...) hold: README.md, docs/*.md, and the external-project example docs/cpp-api.md
# prints (tests/e2e/install_external.sh checks they are installed).
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/external_project
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
