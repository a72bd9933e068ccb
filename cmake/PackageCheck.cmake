# Read by cpack before it packages (CPACK_PROJECT_CONFIG_FILE): refuses a build whose package
# would not install on a machine without CUDA (cmake/Package.cmake says why).
if(CPACK_BYTECOMP_REFUSE)
  message(FATAL_ERROR "ByteComp: no package from this build: ${CPACK_BYTECOMP_REFUSE}")
endif()
