# The sg_kube client tests; included from tests/kube/CMakeLists.txt.
#
# Every test_*.c here is one executable kube_<file> linked with sg_kube.
# test_kube_parse needs no server. The others run against a real
# kube-apiserver: each starts its own in a temporary folder with
# apiserver.sh (the binaries come from the kube_binaries fixture) and
# stops it at exit, or uses the
# server named by $SIGNET_KUBE_ENV (an apiserver.sh env file) when set.
# They run beside other tests, except the two that measure time: the lease
# test (a takeover within its bound) and the client test (the rate
# limiter's pace) run alone (RUN_SERIAL).
if(TARGET sg_kube)
  file(GLOB SIGNET_KUBE_CLIENT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.c)
  foreach(src ${SIGNET_KUBE_CLIENT_TESTS})
    get_filename_component(base ${src} NAME_WE)
    signet_test(kube_${base} SOURCES ${src} LIBS sg_kube)
    target_compile_definitions(kube_${base} PRIVATE KUBE_SCRIPTS="${CMAKE_CURRENT_LIST_DIR}")
    signet_kube_env(env)
    if(base STREQUAL "test_kube_parse")
      set_tests_properties(kube_${base} PROPERTIES LABELS kube TIMEOUT 120 ENVIRONMENT "${env}")
    elseif(base STREQUAL "test_kube_lease" OR base STREQUAL "test_kube_client")
      set_tests_properties(kube_${base} PROPERTIES LABELS kube TIMEOUT 600 RUN_SERIAL TRUE
                           ENVIRONMENT "${env}")
    else()
      set_tests_properties(kube_${base} PROPERTIES LABELS kube TIMEOUT 600 ENVIRONMENT "${env}")
    endif()
  endforeach()
endif()
