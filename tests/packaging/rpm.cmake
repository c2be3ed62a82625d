# The RPM (packaging/rpm.sh, packaging/rpm/): built from the committed HEAD
# with rpmbuild (a Release compile of signet), linted, installed into a
# scratch root, its units verified and the installed signetd run as
# signetd.service runs it (sd_notify, the PIN credential, the watchdog).
# Slow: only with SIGNET_PACKAGING_TESTS.
if(SIGNET_PACKAGING_TESTS)
  add_test(NAME packaging_rpm
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_rpm.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(packaging_rpm PROPERTIES TIMEOUT 1800
    ENVIRONMENT "SIGNET_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endif()
