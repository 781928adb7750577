# TensorBoard event files (src/train/tensorboard/): protobuf classes generated from the vendored
# schema subset src/train/proto/tensorboard_event.proto. Without protobuf the build still works
# and --tensorboard is a clear error (src/train/tensorboard/no_protobuf.cpp). Sets
# MIRROR_WITH_TENSORBOARD (cache) for MirrorInstall.cmake: libmirror.a's users then link
# protobuf-lite too. Sources go to mirror_objects (Note [One set of objects]).
find_package(Protobuf)
set(MIRROR_TB_DIR ${PROJECT_SOURCE_DIR}/src/train)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
  set(MIRROR_WITH_TENSORBOARD ON CACHE INTERNAL "mirror-train --tensorboard is built")
  set(MIRROR_TB_GENERATED ${PROJECT_BINARY_DIR}/generated/tensorboard)
  file(MAKE_DIRECTORY ${MIRROR_TB_GENERATED})
  target_sources(mirror_objects PRIVATE ${MIRROR_TB_DIR}/tensorboard/event_writer.cpp
                                        ${MIRROR_TB_DIR}/proto/tensorboard_event.proto)
  protobuf_generate(TARGET mirror_objects LANGUAGE cpp IMPORT_DIRS ${MIRROR_TB_DIR}/proto
                    PROTOC_OUT_DIR ${MIRROR_TB_GENERATED} OUT_VAR MIRROR_TB_FILES)
  # Where the header lands below PROTOC_OUT_DIR (and how the .pb.cc includes it) differs
  # between CMake versions: ask, and put both folders on the include path.
  list(FILTER MIRROR_TB_FILES INCLUDE REGEX "\\.pb\\.(h|cc)$")
  foreach(file ${MIRROR_TB_FILES})
    get_filename_component(MIRROR_TB_INCLUDE ${file} DIRECTORY)
    if(file MATCHES "\\.cc$")
      set_source_files_properties(${file} PROPERTIES COMPILE_OPTIONS "-w")
    endif()
  endforeach()
  # SYSTEM: protoc's header is not held to our warnings.
  target_include_directories(mirror_objects SYSTEM PRIVATE ${MIRROR_TB_INCLUDE} ${MIRROR_TB_GENERATED})
  foreach(target mirror mirror_static)
    target_link_libraries(${target} PRIVATE protobuf::libprotobuf-lite)
    # The tests parse the events back with the same classes: build tree only.
    target_include_directories(${target} SYSTEM INTERFACE
                               $<BUILD_INTERFACE:${MIRROR_TB_INCLUDE}>
                               $<BUILD_INTERFACE:${MIRROR_TB_GENERATED}>)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:protobuf::libprotobuf-lite>)
    target_compile_definitions(${target} INTERFACE $<BUILD_INTERFACE:MIRROR_WITH_TENSORBOARD=1>)
  endforeach()
else()
  set(MIRROR_WITH_TENSORBOARD OFF CACHE INTERNAL "mirror-train --tensorboard is built")
  message(STATUS "protobuf not found: mirror-train --tensorboard is unavailable")
  target_sources(mirror_objects PRIVATE ${MIRROR_TB_DIR}/tensorboard/no_protobuf.cpp)
endif()
