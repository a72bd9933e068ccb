# The Debian package: `cpack --config build/CPackConfig.cmake -B build/package` makes
# bytecomp_<version>_amd64.deb from the install rules (cmake/Install.cmake) with prefix /usr.
#
# CUDA: the package is made from a BYTECOMP_CUDA=OFF build and holds no CUDA code. A CUDA build
# links libcudart and libnccl, which are not Debian packages, so its engine library would not
# load on a machine without NVIDIA's libraries (and dpkg-shlibdeps cannot name a package for
# them); such a build is refused here with that reason. CUDA machines build from source.

# One version for the .deb and the Python shim's wheel: shim/pyproject.toml's.
file(STRINGS shim/pyproject.toml _bytecomp_version_line REGEX "^version *= *\"[^\"]+\"")
string(REGEX REPLACE "^version *= *\"([^\"]+)\".*" "\\1" BYTECOMP_VERSION
       "${_bytecomp_version_line}")
if(NOT BYTECOMP_VERSION MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+")
  message(FATAL_ERROR "cannot read the version from shim/pyproject.toml (got '${BYTECOMP_VERSION}')")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME bytecomp)
set(CPACK_PACKAGE_VERSION ${BYTECOMP_VERSION})
set(CPACK_PACKAGE_VENDOR "ByteComp")
set(CPACK_PACKAGE_CONTACT "ByteComp maintainers <bytecomp@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "parameter-server communication for distributed training with gradient compression")
set(CPACK_PACKAGE_DESCRIPTION
    "Scheduler and aggregation server daemons (with systemd units), the worker engine library\
 with its C API, the Python shim for PyTorch and MXNet (bytecomp.torch, bytecomp.mxnet),\
 the launcher bytecomp-run, the planner bytecomp-plan and benchmarks. CPU only: the CUDA\
 codecs and NCCL reduction are not in this package.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# Only what the install rules name; no source package.
set(CPACK_SOURCE_GENERATOR "")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # bytecomp_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The libraries the binaries link (libzmq5, libprotobuf32, libabsl, libstdc++6, ...) come
# from dpkg-shlibdeps; python3 runs bytecomp-run and the shim, procps gives the scheduler
# unit's ExecReload its /bin/kill.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.8), procps")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch, python3-matplotlib, prometheus")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_CURRENT_LIST_DIR}/debian/postinst;${CMAKE_CURRENT_LIST_DIR}/debian/prerm;${CMAKE_CURRENT_LIST_DIR}/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

if(BYTECOMP_HAVE_CUDA)
  message(STATUS "ByteComp package: this is a CUDA build; cpack refuses it (configure a "
                 "separate build with -DBYTECOMP_CUDA=OFF to make the .deb)")
  set(CPACK_BYTECOMP_REFUSE
      "this build has CUDA code (BYTECOMP_CUDA found nvcc): its libbytecomp_worker.so needs \
libcudart/libnccl, which are not Debian packages. Make the package from a build configured \
with -DBYTECOMP_CUDA=OFF (README.md, Installing).")
endif()
set(CPACK_PROJECT_CONFIG_FILE "${CMAKE_CURRENT_LIST_DIR}/PackageCheck.cmake")

include(CPack)
