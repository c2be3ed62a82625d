# signet-agent against a real kube-apiserver and a real signetd (node
# authorization on). About two minutes, nearly all of it waiting: the
# refresh at half-life of a 2-minute certificate is waited for.
if(TARGET signet-agent AND TARGET signetd AND TARGET signetctl)
  # fshim.c: an LD_PRELOAD library that holds or fails one file call of the
  # agent on demand (the writer races of test_agent.py's node F). Without
  # sanitizers: it is loaded into a program that brings its own runtime.
  add_library(agent_fshim MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fshim.c)
  target_compile_options(agent_fshim PRIVATE -fno-sanitize=all)
  target_link_options(agent_fshim PRIVATE -fno-sanitize=all)
  target_link_libraries(agent_fshim PRIVATE ${CMAKE_DL_LIBS})
  # its calls must replace the C library's: exported, unlike the project's
  set_target_properties(agent_fshim PROPERTIES C_VISIBILITY_PRESET default)
  signet_kube_env(agent_env "SIGNET_SOFTHSM_MODULE=${SIGNET_SOFTHSM_MODULE}"
                  "SIGNET_FSHIM=$<TARGET_FILE:agent_fshim>")
  list(APPEND agent_env "TSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/ra/tsan.supp")
  add_test(NAME agent_e2e
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_agent.py $<TARGET_FILE:signet-agent>
            $<TARGET_FILE:signetctl> $<TARGET_FILE:signetd> ${CMAKE_SOURCE_DIR})
  set_tests_properties(agent_e2e PROPERTIES LABELS kube TIMEOUT 600 ENVIRONMENT "${agent_env}")
endif()
