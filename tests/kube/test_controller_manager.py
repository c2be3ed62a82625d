#!/usr/bin/python3
"""The test control plane with kube-controller-manager (KUBE_CONTROLLER_MANAGER=1
apiserver.sh start) and kube_rest.py's simulated kubelet, proved end to end:
a Deployment of 2 makes a ReplicaSet and 2 Pods; Pods marked Running and
Ready (without a node: no scheduler runs) make it Available with
availableReplicas 2 at its current generation; one Pod marked crashed takes
availableReplicas to 1; a new image rolls out through a second ReplicaSet
(new Pods marked Ready as they come, the old ReplicaSet scaled to 0 and its
Pods deleted); and after restart-apiserver the running controller manager
still acts (a scale to 3, then to 1). The operator tests build on exactly
this, so it is what must keep working.

It always starts its own server (SIGNET_KUBE_ENV names one without the
controller manager); build-apiserver.sh builds both binaries on a first run.

Usage: test_controller_manager.py KUBE_SCRIPTS
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

KUBE_SCRIPTS = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
del sys.argv[1:]
sys.path.insert(0, KUBE_SCRIPTS)
import kube_rest  # noqa: E402

NS = "kcm-test"
DEPLOY = f"/apis/apps/v1/namespaces/{NS}/deployments/web"
LABELS = {"app": "web"}


def wait_for(what, fn, timeout=60):
    """kube_rest's, with room for a loaded machine."""
    return kube_rest.wait_for(what, fn, timeout)


def condition(obj, kind):
    """The status.conditions entry of that type, or {}."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


class ControllerManager(unittest.TestCase):
    """One scenario in order (the test_N_ prefixes); each step starts from
    where the one before left the Deployment."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kube-cm.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.api_dir = os.path.join(cls.tmp, "api")
        script = os.path.join(KUBE_SCRIPTS, "apiserver.sh")
        cls.addClassCleanup(cls.cleanup)
        subprocess.run([os.path.join(KUBE_SCRIPTS, "build-apiserver.sh"), "--controller-manager"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([script, "start", cls.api_dir], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, KUBE_CONTROLLER_MANAGER="1"))
        with open(os.path.join(cls.api_dir, "env")) as f:
            cls.env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        cls.kube = kube_rest.Kube(cls.env)
        cls.kube.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})

    @classmethod
    def cleanup(cls):
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", cls.api_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.environ.get("SIGNET_KEEP_TMP"):
            print(f"kept {cls.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------

    def deployment(self):
        return self.kube.ok("GET", DEPLOY)

    def replica_sets(self):
        """The Deployment's ReplicaSets (by label; ownerReferences checked
        in step 1), oldest revision first."""
        items = self.kube.ok("GET", f"/apis/apps/v1/namespaces/{NS}/replicasets?labelSelector=app%3Dweb")["items"]
        return sorted(items, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))

    def settled(self, want):
        """The Deployment once its controller has seen its current spec and
        reports `want` (a dict of status fields), else None."""
        d = self.deployment()
        st = d.get("status") or {}
        if st.get("observedGeneration") != d["metadata"]["generation"]:
            return None
        return d if all(st.get(k, 0) == v for k, v in want.items()) else None

    def ready_all(self, selector):
        """Marks every Pod of the selector that is not Ready as Ready (the
        kubelet's part); returns how many Pods there are."""
        pods = self.kube.list_pods(NS, selector)
        for p in pods:
            if condition(p, "Ready").get("status") != "True":
                self.kube.pod_ready(NS, p["metadata"]["name"])
        return len(pods)

    def pods(self, n):
        """The Deployment's Pods when there are n of them, else None."""
        pods = self.kube.list_pods(NS, LABELS)
        return pods if len(pods) == n else None

    def scale(self, n):
        self.kube.ok("PATCH", DEPLOY, {"spec": {"replicas": n}}, "application/merge-patch+json")

    # --- the scenario ----------------------------------------------------------

    def test_1_deployment_makes_a_replicaset_and_pods(self):
        self.kube.ok("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": LABELS},
                     "template": {"metadata": {"labels": LABELS},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.19"}]}}}})
        rs = wait_for("the ReplicaSet", lambda: self.replica_sets())
        self.assertEqual(len(rs), 1)
        owner = rs[0]["metadata"]["ownerReferences"][0]
        self.assertEqual((owner["kind"], owner["name"], owner.get("controller")), ("Deployment", "web", True))
        pods = wait_for("2 Pods", lambda: self.pods(2))
        for p in pods:
            self.assertEqual(p["metadata"]["ownerReferences"][0]["name"], rs[0]["metadata"]["name"])
            self.assertNotIn("nodeName", p["spec"])  # no scheduler
            self.assertEqual(p["status"].get("phase"), "Pending")
        # Nothing is available before the kubelet (the test) says so.
        d = wait_for("the Deployment's first status", lambda: self.settled({"replicas": 2}))
        self.assertEqual(d["status"].get("availableReplicas", 0), 0)

    def test_2_ready_pods_make_it_available(self):
        self.assertEqual(self.ready_all(LABELS), 2)
        pod = self.kube.list_pods(NS, "app=web")[0]
        self.assertEqual(pod["status"]["phase"], "Running")
        self.assertEqual({c["type"]: c["status"] for c in pod["status"]["conditions"]},
                         dict.fromkeys(("PodScheduled", "Initialized", "ContainersReady", "Ready"), "True"))
        cs = pod["status"]["containerStatuses"][0]
        self.assertEqual((cs["name"], cs["image"], cs["ready"], cs["restartCount"]), ("web", "nginx:1.19", True, 0))
        self.assertIn("startedAt", cs["state"]["running"])
        self.assertTrue(cs["imageID"].startswith("docker.io/library/nginx@sha256:"))
        # Available although no Pod has a node: the controllers read only Ready.
        d = wait_for("availableReplicas 2", lambda: self.settled({"readyReplicas": 2, "availableReplicas": 2}))
        self.assertEqual(condition(d, "Available")["status"], "True")
        self.assertEqual(condition(d, "Progressing").get("reason"), "NewReplicaSetAvailable")
        rs = self.replica_sets()[0]
        self.assertEqual(rs["status"].get("availableReplicas"), 2)

    def test_3_a_crashed_pod_is_unavailable(self):
        name = self.kube.list_pods(NS, LABELS)[0]["metadata"]["name"]
        pod = self.kube.pod_failed(NS, name, exit_code=2, message="boom")
        cs = pod["status"]["containerStatuses"][0]
        self.assertEqual(cs["state"]["waiting"]["reason"], "CrashLoopBackOff")
        self.assertEqual((cs["lastState"]["terminated"]["exitCode"], cs["restartCount"], cs["ready"]), (2, 1, False))
        self.assertEqual(pod["status"]["phase"], "Running")
        self.assertEqual(condition(pod, "Ready")["reason"], "ContainersNotReady")
        d = wait_for("availableReplicas 1",
                     lambda: self.settled({"readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1}))
        # 2 replicas at the default maxUnavailable 25% (rounded down: 0)
        self.assertEqual(condition(d, "Available")["status"], "False")
        # The controller leaves a crashing Pod in place (the kubelet restarts it).
        self.assertEqual(len(self.kube.list_pods(NS, LABELS)), 2)
        # The same Pod recovering: back to 2, its restart count kept.
        pod = self.kube.pod_ready(NS, name)
        self.assertEqual(pod["status"]["containerStatuses"][0]["restartCount"], 1)
        wait_for("availableReplicas 2 again", lambda: self.settled({"availableReplicas": 2}))
        # Terminated rather than waiting (what the kubelet reports right after the exit).
        pod = self.kube.pod_failed(NS, name, exit_code=3, message="bind: address already in use", crash_loop=False)
        cs = pod["status"]["containerStatuses"][0]
        self.assertEqual((cs["state"]["terminated"]["exitCode"], cs["state"]["terminated"]["message"],
                          cs["restartCount"]), (3, "bind: address already in use", 2))
        wait_for("availableReplicas 1 again", lambda: self.settled({"availableReplicas": 1}))
        self.kube.pod_ready(NS, name)
        wait_for("availableReplicas 2 once more", lambda: self.settled({"availableReplicas": 2}))

    def test_4_a_new_template_rolls_out_a_new_replicaset(self):
        old = self.replica_sets()[0]["metadata"]["name"]
        self.kube.ok("PATCH", DEPLOY, {"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1.20"}]}}}}, "application/strategic-merge-patch+json")
        rs = wait_for("a second ReplicaSet", lambda: len(self.replica_sets()) == 2 and self.replica_sets())
        new = rs[1]
        self.assertNotEqual(new["metadata"]["name"], old)
        new_pods = {"pod-template-hash": new["metadata"]["labels"]["pod-template-hash"]}

        def rolled_out():
            # The kubelet's part: whatever new Pod appears gets Ready.
            self.ready_all(new_pods)
            return self.settled({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2})
        d = wait_for("the rollout", rolled_out)
        self.assertEqual(condition(d, "Progressing").get("reason"), "NewReplicaSetAvailable")
        self.assertEqual(self.kube.ok("GET", f"/apis/apps/v1/namespaces/{NS}/replicasets/{old}")["spec"]["replicas"], 0)
        pods = wait_for("the old Pods gone", lambda: self.pods(2))
        for p in pods:
            self.assertEqual(p["spec"]["containers"][0]["image"], "nginx:1.20")

    def test_5_survives_an_apiserver_restart(self):
        script = os.path.join(KUBE_SCRIPTS, "apiserver.sh")
        subprocess.run([script, "restart-apiserver", self.api_dir], check=True, stdout=subprocess.DEVNULL)
        # status counts the controller manager: it kept running through the restart
        self.assertEqual(subprocess.run([script, "status", self.api_dir]).returncode, 0)
        self.scale(3)
        wait_for("a third Pod", lambda: self.ready_all(LABELS) == 3, timeout=90)
        wait_for("availableReplicas 3", lambda: self.settled({"availableReplicas": 3}))
        self.scale(1)
        wait_for("1 Pod left", lambda: self.pods(1))
        wait_for("availableReplicas 1 of 1", lambda: self.settled({"replicas": 1, "availableReplicas": 1}))


if __name__ == "__main__":
    unittest.main(verbosity=2)
