# TensorBoard event files (src/train/tensorboard/): protobuf classes generated from the vendored
# schema subset src/train/proto/tensorboard_event.proto. Without protobuf the build still works
# and --tensorboard is a clear error (src/train/tensorboard/no_protobuf.cpp).
find_package(Protobuf)
set(MIRROR_TB_DIR ${PROJECT_SOURCE_DIR}/src/train)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
  set(MIRROR_TB_GENERATED ${PROJECT_BINARY_DIR}/generated/tensorboard)
  file(MAKE_DIRECTORY ${MIRROR_TB_GENERATED})
  target_sources(mirror PRIVATE ${MIRROR_TB_DIR}/tensorboard/event_writer.cpp
                                ${MIRROR_TB_DIR}/proto/tensorboard_event.proto)
  protobuf_generate(TARGET mirror LANGUAGE cpp IMPORT_DIRS ${MIRROR_TB_DIR}/proto
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
  # SYSTEM: protoc's header is not held to our warnings. The tests parse the events back with
  # the same classes, hence PUBLIC (build tree only).
  target_include_directories(mirror SYSTEM PUBLIC $<BUILD_INTERFACE:${MIRROR_TB_INCLUDE}>
                                                  $<BUILD_INTERFACE:${MIRROR_TB_GENERATED}>)
  target_link_libraries(mirror PUBLIC protobuf::libprotobuf-lite)
  # INTERFACE: only the tests ask; the library's own files compile as without it.
  target_compile_definitions(mirror INTERFACE $<BUILD_INTERFACE:MIRROR_WITH_TENSORBOARD=1>)
else()
  message(STATUS "protobuf not found: mirror-train --tensorboard is unavailable")
  target_sources(mirror PRIVATE ${MIRROR_TB_DIR}/tensorboard/no_protobuf.cpp)
endif()
