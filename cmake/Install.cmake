# Install rules: `cmake --install build --prefix P` lays ByteComp out as an operator expects it,
# and CPack (cmake/Package.cmake) packages exactly this tree with P = /usr.
#
#   P/bin                       daemons, bytecomp-run, bytecomp-plan, bytecomp-timeline,
#                               bytecomp-plot, benchmarks' binaries
#   P/lib                       libbytecomp_worker.so (the engine the Python shim loads)
#   P/include/bytecomp          c_api.h, the engine's C API
#   P/lib/python3/dist-packages the Python shim (bytecomp.torch, bytecomp.mxnet); on Debian this
#                               directory is on python3's path for P = /usr and P = /usr/local
#   P/share/bytecomp            model profiles, codec cost tables, cluster descriptions, example
#                               configs, systemd env examples, Kubernetes manifests
#   P/lib/systemd/system        bytecomp-scheduler.service, bytecomp-server@.service
#   P/share/doc/bytecomp        README.md and docs/*.md; the units' Documentation= points at
#                               OPERATING.md
#
# Targets are referred to by name and only when they exist, so that the folders' own
# CMakeLists.txt stay free of install code.
include(GNUInstallDirs)

set(BYTECOMP_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python shim (package bytecomp) is installed, relative to the prefix")
set(BYTECOMP_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/bytecomp")
set(BYTECOMP_INSTALL_DOCDIR "${CMAKE_INSTALL_DATADIR}/doc/bytecomp")
set(BYTECOMP_INSTALL_UNITDIR "lib/systemd/system")

# Programs for operators. The test-only and reference programs (exact_sum_worker,
# bytecomp-zmq-reference, planner_bench, cpu_offload_bench) stay in the build tree:
# planner_bench reads the source tree, the others only make sense beside the test suite.
# `cmake --build build --target bytecomp-installed` builds just what is installed (the
# packaging test's build without CUDA does only that).
add_custom_target(bytecomp-installed)
foreach(program bytecomp-scheduler bytecomp-server bytecomp-plan bytecomp-keygen
                bytecomp-bench bytecomp-linkprobe bytecomp-codec-bench)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    add_dependencies(bytecomp-installed ${program})
  endif()
endforeach()
install(PROGRAMS deploy/bytecomp-run DESTINATION ${CMAKE_INSTALL_BINDIR})
# Observability tools (Python, Debian's python3; bytecomp-plot needs python3-matplotlib).
install(PROGRAMS tools/bytecomp-timeline tools/bytecomp-plot DESTINATION ${CMAKE_INSTALL_BINDIR})

# Files whose text depends on the prefix chosen at install time (`cmake --install --prefix`,
# CPack's /usr) are written at install time into the build tree, then installed from there with
# file(INSTALL), which honours DESTDIR and lists them in install_manifest.txt.
set(_bytecomp_generated "${CMAKE_CURRENT_BINARY_DIR}/install-generated")

if(TARGET bytecomp_worker)
  install(TARGETS bytecomp_worker LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  add_dependencies(bytecomp-installed bytecomp_worker)
  install(FILES worker/include/bytecomp/c_api.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bytecomp)
endif()

# The Python shim, and beside it where the engine library was installed, so that
# bytecomp/_engine.py finds it without BYTECOMP_LIBRARY.
install(DIRECTORY shim/bytecomp DESTINATION ${BYTECOMP_INSTALL_PYTHONDIR}
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
if(TARGET bytecomp_worker)
  install(CODE "
    get_filename_component(_prefix \"\${CMAKE_INSTALL_PREFIX}\" ABSOLUTE)
    set(_lib \"\${_prefix}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:bytecomp_worker>\")
    file(WRITE \"${_bytecomp_generated}/_installed.py\"
         \"# Written by ByteComp's install step: where libbytecomp_worker.so was installed.\\nLIBRARY_PATH = \\\"\${_lib}\\\"\\n\")
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${BYTECOMP_INSTALL_PYTHONDIR}/bytecomp\"
         TYPE FILE FILES \"${_bytecomp_generated}/_installed.py\")
  ")
endif()

# Shipped planner inputs and example configs.
install(DIRECTORY scheduler/planner/profiles scheduler/planner/costs scheduler/planner/clusters
        DESTINATION ${BYTECOMP_INSTALL_DATADIR} FILES_MATCHING PATTERN "*.pbtxt")
install(DIRECTORY deploy/examples/ DESTINATION ${BYTECOMP_INSTALL_DATADIR}/examples)
install(FILES deploy/systemd/scheduler.env.example deploy/systemd/server.env.example
        DESTINATION ${BYTECOMP_INSTALL_DATADIR}/systemd)
install(DIRECTORY deploy/k8s/ DESTINATION ${BYTECOMP_INSTALL_DATADIR}/k8s
        FILES_MATCHING PATTERN "*.yaml")
install(FILES README.md docs/OPERATING.md docs/CONFIGURATION.md docs/SECURITY.md docs/FAILOVER.md
              docs/BENCHMARKS.md docs/TESTING.md docs/ARCHITECTURE.md
        DESTINATION ${BYTECOMP_INSTALL_DOCDIR})

# systemd units. The repository's units name the Debian package's paths (/usr/bin, /usr/share);
# another prefix gets them rewritten to its own.
foreach(unit bytecomp-scheduler.service bytecomp-server@.service)
  install(CODE "
    file(READ \"${CMAKE_CURRENT_SOURCE_DIR}/deploy/systemd/${unit}\" _unit)
    get_filename_component(_prefix \"\${CMAKE_INSTALL_PREFIX}\" ABSOLUTE)
    string(REPLACE \"/usr/bin/\" \"\${_prefix}/${CMAKE_INSTALL_BINDIR}/\" _unit \"\${_unit}\")
    string(REPLACE \"/usr/share/\" \"\${_prefix}/${CMAKE_INSTALL_DATADIR}/\" _unit \"\${_unit}\")
    file(WRITE \"${_bytecomp_generated}/${unit}\" \"\${_unit}\")
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${BYTECOMP_INSTALL_UNITDIR}\"
         TYPE FILE FILES \"${_bytecomp_generated}/${unit}\")
  ")
endforeach()
