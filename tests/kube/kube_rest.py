"""Just enough of the Kubernetes REST API for the Python tests that run
signet's programs against the test API server (tests/kube/apiserver.sh):
requests with the admin token from the server's env file, and waiting for
a condition, and creating CRDs from a manifest (also from the command
line, for perf scripts). The standard library, and python3-yaml for
manifests (Debian's python3)."""
import json
import os
import ssl
import sys
import time
import urllib.error
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
