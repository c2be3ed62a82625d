"""Just enough of the Kubernetes REST API for the Python tests that run
signet's programs against the test API server (tests/kube/apiserver.sh):
requests with the admin token from the server's env file, and waiting for
a condition, and creating CRDs from a manifest (also from the command
line, for perf scripts). The standard library, and python3-yaml for
manifests (Debian's python3).

With kube-controller-manager running (KUBE_CONTROLLER_MANAGER=1
apiserver.sh start), Deployments make ReplicaSets and Pods, but no kubelet
runs them and no scheduler binds them: the test is the kubelet.
list_pods finds a workload's Pods, pod_ready reports one Running and Ready
and pod_failed reports its container crashed, each writing the status a
1.20 kubelet would (the status subresource, the whole status replaced).
The Pods keep no nodeName and no IPs; the ReplicaSet and Deployment
controllers count them as available all the same, since they read only
the Ready condition (and its lastTransitionTime, for minReadySeconds)."""
import hashlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def wait_for(what, fn, timeout=30, interval=0.2):
    """Polls fn until it returns something true, and returns that; fails
    with `what` and the last value."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Kube:
    """The API server of an apiserver.sh env (a dict of its KEY=VALUE
    lines), as its admin."""

    def __init__(self, env):
        self.server = env["KUBE_APISERVER"]
        with open(env["KUBE_TOKEN_FILE"]) as f:
            self.admin_token = f.read().strip()
        self.ctx = ssl.create_default_context(cafile=env["KUBE_CA_FILE"])

    def req(self, method, path, body=None, ctype="application/json"):
        """(HTTP code, decoded JSON body); errors are answers too."""
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.server + path, data=data, method=method,
                                   headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": ctype,
                                            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(r, context=self.ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            body = e.read() or b"{}"
            try:
                return e.code, json.loads(body)
            except ValueError:  # "404 page not found" before a new API is served
                return e.code, {"message": body.decode(errors="replace")}

    def ok(self, method, path, body=None, ctype="application/json"):
        """The body of a 2xx answer; anything else fails."""
        code, doc = self.req(method, path, body, ctype)
        assert 200 <= code < 300, f"{method} {path}: {code} {doc.get('message')}"
        return doc

    def get(self, path):
        """The object, or None when the answer is not 200."""
        code, doc = self.req("GET", path)
        return doc if code == 200 else None

    def apply_crds(self, path, timeout=30):
        """Creates every CustomResourceDefinition of a manifest (one that
        exists already is fine) and waits until each new resource is
        served."""
        import yaml
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CustomResourceDefinition"]
        for doc in docs:
            code, out = self.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            assert code in (201, 409), f"CRD {doc['metadata']['name']}: {code} {out.get('message')}"
            spec = doc["spec"]
            path_ = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
            wait_for(f"{spec['names']['plural']} to be served", lambda: self.get(path_) is not None, timeout)

    # --- the simulated kubelet ---------------------------------------------

    def list_pods(self, namespace, selector=None):
        """The Pods of a namespace (a list of objects, sorted by name),
        those matching a label selector when given: a string such as
        "app=web,tier!=db" or a dict of labels that must all match (for
        instance a Deployment's spec.selector.matchLabels)."""
        path = f"/api/v1/namespaces/{namespace}/pods"
        if selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": _selector(selector)})
        return sorted(self.ok("GET", path)["items"], key=lambda p: p["metadata"]["name"])

    def pod_status(self, namespace, name, fn, attempts=10):
        """Replaces a Pod's status with fn(pod) (fn gets the whole object
        and returns the new status) through the status subresource, reading
        again on a conflict (a controller may write the Pod meanwhile);
        returns the Pod as written."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        for _ in range(attempts):
            pod = self.ok("GET", path)
            pod["status"] = fn(pod)
            code, doc = self.req("PUT", path + "/status", pod)
            if code == 200:
                return doc
            assert code == 409, f"PUT {path}/status: {code} {doc.get('message')}"
        raise AssertionError(f"PUT {path}/status: still conflicting after {attempts} attempts")

    def pod_ready(self, namespace, name):
        """Reports the Pod as a kubelet does once every container runs and
        passes its readiness probe: phase Running, the four conditions
        True, every container ready, started and running (since now, or
        since it last started if it already ran), restart counts kept, and
        init containers (if any) terminated with Completed. Returns the
        Pod."""
        def status(pod):
            now = _now()
            st = pod.get("status") or {}
            old = {c["name"]: c for c in st.get("containerStatuses") or []}
            start = st.get("startTime") or now
            ready = []
            for spec in pod["spec"]["containers"]:
                prev = old.get(spec["name"]) or {}
                running = (prev.get("state") or {}).get("running") or {"startedAt": now}
                ready.append(_container(pod, spec, {"running": running}, True, prev.get("restartCount", 0),
                                        prev.get("lastState") or {}))
            new = dict(st, phase="Running", startTime=start, containerStatuses=ready,
                       conditions=_conditions(st.get("conditions"), True, now))
            inits = pod["spec"].get("initContainers") or []
            if inits:
                done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start, "finishedAt": start}}
                new["initContainerStatuses"] = [_container(pod, spec, done, True, 0, {}) for spec in inits]
            return new
        return self.pod_status(namespace, name, status)

    def pod_failed(self, namespace, name, container=None, exit_code=1, message="container exited with an error",
                   crash_loop=True):
        """Reports a container of the Pod (the first unless named) as
        crashed with exit_code (not 0) and message, as a kubelet does:
        Ready and ContainersReady False with reason ContainersNotReady, the
        container not ready and either waiting in CrashLoopBackOff with the
        crash as its lastState (crash_loop, what one sees between restarts)
        or terminated itself (reason Error). With restartPolicy Always or
        OnFailure (every Deployment's Pod) its restartCount goes up by one
        and the phase stays Running; with Never it is not restarted and the
        Pod becomes Failed once no container runs (Ready then has reason
        PodCompleted). Other containers keep their status. Returns the
        Pod."""
        assert exit_code != 0, "a container that exits 0 has not failed"

        def status(pod):
            now = _now()
            st = pod.get("status") or {}
            specs = pod["spec"]["containers"]
            target = container or specs[0]["name"]
            assert any(c["name"] == target for c in specs), f"pod {name} has no container {target}"
            restarts = pod["spec"].get("restartPolicy", "Always") != "Never"
            old = {c["name"]: c for c in st.get("containerStatuses") or []}
            statuses = []
            for spec in specs:
                prev = old.get(spec["name"])
                if spec["name"] != target:
                    statuses.append(prev or _container(pod, spec, {"waiting": {"reason": "ContainerCreating"}},
                                                       False, 0, {}))
                    continue
                prev = prev or {}
                count = prev.get("restartCount", 0)
                crash = {"terminated": {
                    "exitCode": exit_code, "reason": "Error", "message": message,
                    "startedAt": ((prev.get("state") or {}).get("running") or {}).get("startedAt", now),
                    "finishedAt": now,
                    "containerID": "containerd://" + _fake_id(pod["metadata"].get("uid"), spec["name"], count)}}
                if restarts and crash_loop:
                    backoff = (f"back-off 10s restarting failed container={spec['name']} "
                               f"pod={name}_{namespace}({pod['metadata'].get('uid')})")
                    state, last = {"waiting": {"reason": "CrashLoopBackOff", "message": backoff}}, crash
                else:
                    state, last = crash, prev.get("lastState") or {}
                statuses.append(_container(pod, spec, state, False, count + int(restarts), last))
            unready = [c["name"] for c in statuses if not c.get("ready")]
            phase = "Running"
            if not restarts and all("terminated" in c["state"] for c in statuses):
                phase = "Failed"
            reason, why = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
            if phase == "Failed":
                reason, why = "PodCompleted", ""
            return dict(st, phase=phase, startTime=st.get("startTime") or now, containerStatuses=statuses,
                        conditions=_conditions(st.get("conditions"), False, now, reason, why))
        return self.pod_status(namespace, name, status)


def _now():
    """A Kubernetes timestamp (RFC 3339, whole seconds, as the API keeps)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _selector(labels):
    """A label selector string from a dict of labels (all must match), or
    the string itself."""
    if isinstance(labels, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return labels


def _conditions(old, ready, now, reason=None, message=None):
    """A kubelet's pod conditions: Initialized and PodScheduled True,
    Ready and ContainersReady as `ready` (False ones with reason and
    message). Each keeps its lastTransitionTime while its status stays
    the same: minReadySeconds counts from Ready's."""
    before = {c["type"]: c for c in old or []}
    out = []
    for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
        status = "True" if ready or kind in ("Initialized", "PodScheduled") else "False"
        prev = before.get(kind) or {}
        since = prev.get("lastTransitionTime") if prev.get("status") == status else None
        c = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since or now}
        if status == "False":
            c["reason"] = reason
            if message:
                c["message"] = message
        out.append(c)
    return out


def _fake_id(*parts):
    """A stable 64-hex-digit id, for container ids and image digests."""
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def _image_id(image):
    """The imageID a kubelet on containerd reports: the image's repository
    with the digest pulled (here a made-up one, stable per image)."""
    repo = image.split("@", 1)[0]
    slash = repo.rfind("/")
    if ":" in repo[slash + 1:]:
        repo = repo[:repo.rindex(":")]
    if "/" not in repo:
        repo = "docker.io/library/" + repo
    elif "." not in repo.split("/", 1)[0] and ":" not in repo.split("/", 1)[0]:
        repo = "docker.io/" + repo
    return f"{repo}@sha256:{_fake_id('image', image)}"


def _container(pod, spec, state, ready, restarts, last_state):
    """One containerStatuses entry for container `spec` of `pod`."""
    return {"name": spec["name"], "image": spec["image"], "imageID": _image_id(spec["image"]),
            "containerID": "containerd://" + _fake_id(pod["metadata"].get("uid"), spec["name"], restarts),
            "ready": ready, "started": "running" in state, "restartCount": restarts,
            "state": state, "lastState": last_state}


class ApiServer:
    """The API server a Python test runs against: the one named by
    SIGNET_KUBE_ENV (an apiserver.sh env file; shared, never stopped
    here), or one of its own in TMP/api, built and started through
    build-apiserver.sh and apiserver.sh. .env is the env file as a dict,
    .own whether this process started it."""

    def __init__(self, tmp):
        import subprocess
        scripts = os.path.dirname(os.path.abspath(__file__))
        shared = os.environ.get("SIGNET_KUBE_ENV")
        self.own = not shared
        self.dir = None
        env_file = shared
        if self.own:
            self.dir = os.path.join(tmp, "api")
            os.mkdir(self.dir)
            subprocess.run([os.path.join(scripts, "build-apiserver.sh")], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([os.path.join(scripts, "apiserver.sh"), "start", self.dir], check=True,
                           stdout=subprocess.DEVNULL)
            env_file = os.path.join(self.dir, "env")
        with open(env_file) as f:
            self.env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)

    def stop(self):
        """Stops the server if it is ours (a shared one keeps running)."""
        import subprocess
        if self.own:
            subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "apiserver.sh"), "stop",
                            self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _env_from_environ():
    return {k: os.environ[k] for k in ("KUBE_APISERVER", "KUBE_TOKEN_FILE", "KUBE_CA_FILE")}


if __name__ == "__main__":
    # For scripts: tests/kube/kube_rest.py apply-crds FILE..., with the
    # apiserver.sh env in the environment (perf/kubebench.sh,
    # perf/approverbench.sh).
    if len(sys.argv) < 3 or sys.argv[1] != "apply-crds":
        sys.exit("usage: kube_rest.py apply-crds FILE...")
    kube = Kube(_env_from_environ())
    for manifest in sys.argv[2:]:
        kube.apply_crds(manifest)
