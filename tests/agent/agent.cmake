# signet-agent against a real kube-apiserver and a real signetd (node
# authorization on). About two minutes, nearly all of it waiting: the
# refresh at half-life of a 2-minute certificate is waited for.
if(TARGET signet-agent AND TARGET signetd AND TARGET signetctl)
  signet_kube_env(agent_env "SIGNET_SOFTHSM_MODULE=${SIGNET_SOFTHSM_MODULE}")
  list(APPEND agent_env "TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/ra/tsan.supp")
  add_test(NAME agent_e2e
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_agent.py $<TARGET_FILE:signet-agent>
            $<TARGET_FILE:signetctl> $<TARGET_FILE:signetd> ${CMAKE_SOURCE_DIR})
  set_tests_properties(agent_e2e PROPERTIES LABELS kube TIMEOUT 600 ENVIRONMENT "${agent_env}")
endif()
