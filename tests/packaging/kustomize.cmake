# packaging/kubernetes through kustomize (test_kustomize.py): every
# kustomization rendered by Debian's kubectl 1.20 (tests/kube/kubectl.sh,
# fetched once into the user's cache, never installed), the objects checked,
# accepted by a server-side dry run of the test API server, and signetd's and
# signet-trust's RBAC asked both ways with `kubectl auth can-i`. Cheap once
# kube-apiserver and kubectl are cached (about 30 s), so it runs in every
# build, not only with SIGNET_PACKAGING_TESTS; every build but a sanitizer
# one, as no signet code runs in it (in the test command it ran three times
# for one result, 44-52 s each). A kube test like the others
# (tests/operator/CMakeLists.txt): label kube, its own server unless
# SIGNET_KUBE_ENV names a running one to share.
# Included from tests/packaging/CMakeLists.txt.
signet_kube_env(kustomize_env)
if(SIGNET_SANITIZE STREQUAL "")
  add_test(NAME packaging_kustomize
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/test_kustomize.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(packaging_kustomize PROPERTIES LABELS kube TIMEOUT 600
    ENVIRONMENT "${kustomize_env}")
endif()
