# libscps as other programs use it: libscps.so (soname libscps.so.MAJOR,
# exporting only the public API) and libscps.a, both made of the objects of
# scps_client, scps_wire and scps_shard; the public headers under
# include/scps/, scps.pc, the CMake package scps (scps::scps), and install
# rules for all of them. The programs install themselves (server/, client/).

# The public API: the headers a program outside this tree includes. Every
# function declared in them is exported, and only those
# (tests/install/check_exports.py checks libscps.so against this list and
# cmake/libscps.map). The one list to change when the API's headers change.
# scps_schedule.h and scps_train.h stay internal (their objects are in the
# library, hidden): their option and hook structs have no way yet to grow
# without breaking the ABI, which a public header would promise.
set(SCPS_PUBLIC_HEADERS
    ${CMAKE_SOURCE_DIR}/client/scps_client.h
    ${CMAKE_SOURCE_DIR}/shard/scps_error.h
    ${CMAKE_SOURCE_DIR}/shard/scps_exmy.h
    ${CMAKE_SOURCE_DIR}/shard/scps_input.h
    ${CMAKE_SOURCE_DIR}/shard/scps_memtune.h
    ${CMAKE_SOURCE_DIR}/shard/scps_version.h)

# The headers installed: the public ones and every header they include with
# #include "..." (found beside the including header, then in shard/, proto/,
# client/), so that the installed set compiles whatever the public headers
# include today.
function(scps_header_closure out)
  set(todo ${ARGN})
  set(seen "")
  while(todo)
    list(POP_FRONT todo h)
    if(h IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${h})
    file(STRINGS ${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    get_filename_component(here ${h} DIRECTORY)
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" name "${line}")
      set(found "")
      foreach(dir ${here} ${CMAKE_SOURCE_DIR}/shard ${CMAKE_SOURCE_DIR}/proto ${CMAKE_SOURCE_DIR}/client)
        if(EXISTS ${dir}/${name})
          set(found ${dir}/${name})
          break()
        endif()
      endforeach()
      if(NOT found)
        message(FATAL_ERROR "${h} includes \"${name}\", found in none of shard/, proto/, client/")
      endif()
      list(APPEND todo ${found})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()
scps_header_closure(SCPS_INSTALLED_HEADERS ${SCPS_PUBLIC_HEADERS})

set(SCPS_LIBRARY_OBJECTS $<TARGET_OBJECTS:scps_client> $<TARGET_OBJECTS:scps_wire> $<TARGET_OBJECTS:scps_shard>)
set(SCPS_LIBRARY_MAP ${CMAKE_SOURCE_DIR}/cmake/libscps.map)

add_library(scps SHARED ${SCPS_LIBRARY_OBJECTS})
set_target_properties(scps PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${SCPS_LIBRARY_MAP})
# The export list names each public function in version node SCPS_0 and
# makes everything else local; --no-undefined: every dependency is named here.
target_link_options(scps PRIVATE -Wl,--version-script=${SCPS_LIBRARY_MAP} -Wl,--no-undefined)
target_link_libraries(scps PRIVATE PkgConfig::GRPC PkgConfig::PROTOBUFC PkgConfig::OPENSSL Threads::Threads m)
target_include_directories(scps INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_dependencies(scps scps_client scps_wire scps_shard)

add_library(scps_static STATIC ${SCPS_LIBRARY_OBJECTS})
set_target_properties(scps_static PROPERTIES OUTPUT_NAME scps)
add_dependencies(scps_static scps_client scps_wire scps_shard)

install(TARGETS scps EXPORT scpsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS scps_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${SCPS_INSTALLED_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/scps)

# scps.pc finds its prefix from its own place (${pcfiledir}), so an install
# with `cmake --install build --prefix P` is found under any P.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(SCPS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH SCPS_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
  string(REGEX REPLACE "/$" "" SCPS_PC_UP "${SCPS_PC_UP}")
  set(SCPS_PC_PREFIX "\${pcfiledir}/${SCPS_PC_UP}")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/scps.pc.in ${CMAKE_BINARY_DIR}/scps.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/scps.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(CMakePackageConfigHelpers)
set(SCPS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/scps)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/scpsConfig.cmake.in
  ${CMAKE_BINARY_DIR}/scpsConfig.cmake INSTALL_DESTINATION ${SCPS_CMAKE_DIR})
# Every 0.x release shares the soname libscps.so.0: SameMajorVersion says the same.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/scpsConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(EXPORT scpsTargets NAMESPACE scps:: DESTINATION ${SCPS_CMAKE_DIR})
install(FILES ${CMAKE_BINARY_DIR}/scpsConfig.cmake ${CMAKE_BINARY_DIR}/scpsConfigVersion.cmake
  DESTINATION ${SCPS_CMAKE_DIR})
