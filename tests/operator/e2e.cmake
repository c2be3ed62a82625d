# The operator's Deployment really runs (test_e2e.py): kube-apiserver with
# kube-controller-manager (always its own server: SIGNET_KUBE_ENV names one
# without the controller manager), signet-operator, and the test as the
# kubelet running the Pod's signetd from its spec in a private mount
# namespace, against a SoftHSM2 CA from signetctl init. Included from
# tests/operator/CMakeLists.txt. Needs root and the container ports 6443,
# 9402 and 6060 free on the host: RESOURCE_LOCK host_ports, which every
# test serving on those fixed ports holds.
if(TARGET signet-operator AND TARGET signetd AND TARGET signetctl)
  add_test(NAME operator_e2e
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_e2e.py $<TARGET_FILE:signet-operator>
            $<TARGET_FILE:signetd> $<TARGET_FILE:signetctl> ${CMAKE_SOURCE_DIR})
  set_tests_properties(operator_e2e PROPERTIES LABELS kube TIMEOUT 600 RESOURCE_LOCK host_ports
    ENVIRONMENT "SIGNET_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp;SIGNET_SOFTHSM_MODULE=${SIGNET_SOFTHSM_MODULE};TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/ra/tsan.supp")
endif()
