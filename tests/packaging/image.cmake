# The OCI image and HSM access from a container (packaging/image.sh,
# packaging/README.md).
#
# packaging_p11kit (every build): signetd on a SoftHSM2 token forwarded by
# `p11-kit server` to p11-kit's client module, as a container reaches a
# host's HSM; cheap, so it runs under the sanitizers too (TSan: gRPC's
# suppressions, as the daemon tests).
if(TARGET signetd AND TARGET signetctl)
  pkg_get_variable(SIGNET_P11_MODULE_DIR p11-kit-1 p11_module_path)
  set(SIGNET_P11KIT_CLIENT "${SIGNET_P11_MODULE_DIR}/p11-kit-client.so" CACHE FILEPATH
      "p11-kit's PKCS#11 client module (package p11-kit-modules)")
  add_test(NAME packaging_p11kit
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_p11kit.py $<TARGET_FILE:signetctl>
            $<TARGET_FILE:signetd> ${CMAKE_SOURCE_DIR}/proto ${CMAKE_SOURCE_DIR}/tests/ra ${SIGNET_P11KIT_CLIENT})
  set_tests_properties(packaging_p11kit PROPERTIES TIMEOUT 300
    ENVIRONMENT "SIGNET_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp;SIGNET_SOFTHSM_MODULE=${SIGNET_SOFTHSM_MODULE};TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/ra/tsan.supp")
endif()

# packaging_image (SIGNET_PACKAGING_TESTS only): packaging/image.sh builds
# the image from this build (SIGNET_BUILD_DIR, so nothing is compiled
# twice; it must be a Release build) with mmdebstrap and umoci, downloading
# Debian packages through the machine's apt sources; the image is then run
# unpacked on a read-only root as its user. Root only (mount namespaces,
# chroot); RESOURCE_LOCK host_ports, because the image serves on its
# container ports 6443, 9402 and 6060 of the host.
if(SIGNET_PACKAGING_TESTS AND TARGET signetd AND TARGET signetctl AND TARGET signet-trust
   AND TARGET signet-operator)
  add_test(NAME packaging_image
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_image.py ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(packaging_image PROPERTIES TIMEOUT 1200 RESOURCE_LOCK host_ports
    ENVIRONMENT "SIGNET_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endif()
