# The TrustManager reconciler (operator/sg_trustmanager) against a real
# kube-apiserver (tests/kube/apiserver.sh, through test_kube_env.h), in
# process. Included from tests/operator/CMakeLists.txt. With signet-trust
# built, the test also checks that it parses the arguments the reconciler
# writes into its Deployment.
if(TARGET sg_operator)
  signet_kube_env(tm_env)
  signet_test(operator_test_kube_trustmanager SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kube_trustmanager.c
              LIBS sg_operator OpenSSL::Crypto)
  target_compile_definitions(operator_test_kube_trustmanager PRIVATE KUBE_SCRIPTS="${CMAKE_SOURCE_DIR}/tests/kube"
                             SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_include_directories(operator_test_kube_trustmanager PRIVATE ${CMAKE_SOURCE_DIR}/tests/kube)
  if(TARGET signet-trust)
    target_compile_definitions(operator_test_kube_trustmanager PRIVATE SIGNET_TRUST="$<TARGET_FILE:signet-trust>")
    add_dependencies(operator_test_kube_trustmanager signet-trust)
  endif()
  set_tests_properties(operator_test_kube_trustmanager PROPERTIES LABELS kube TIMEOUT 600
                       ENVIRONMENT "${tm_env}")
endif()
