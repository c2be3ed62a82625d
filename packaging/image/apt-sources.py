#!/usr/bin/python3
"""Prints, as one deb822 sources file, the machine's own apt sources for a
Debian suite (default bookworm, Debian 12): the "deb" entries of
/etc/apt/sources.list, sources.list.d/*.list and sources.list.d/*.sources
that name the suite or one of its -updates/-security/-backports suites,
with only those suites kept. Nothing is invented: no mirror host appears in
this file, the build uses whatever apt on this machine uses. Exits 1 when
the machine has no such source (then give packaging/image.sh a sources
file with SIGNET_APT_SOURCES).

usage: apt-sources.py [SUITE] [ROOT]   (ROOT: where etc/apt is, default /)
"""
import glob
import os
import re
import sys

suite = sys.argv[1] if len(sys.argv) > 1 else "bookworm"
root = sys.argv[2] if len(sys.argv) > 2 else "/"
wanted = re.compile(rf"^{re.escape(suite)}(-updates|-security|-backports)?/?$")


def deb822(text):
    """Stanzas of a .sources file as dicts (folded lines joined)."""
    out, cur, key = [], {}, None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                out.append(cur)
            cur, key = {}, None
        elif line[0] in " \t" and key:
            cur[key] += "\n " + line.strip()  # an inline Signed-By key keeps its lines
        elif ":" in line:
            key, val = line.split(":", 1)
            key = key.strip().lower()
            cur[key] = val.strip()
    return out


def one_line(text):
    """deb lines of a .list file as deb822-like dicts."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^(deb|deb-src)\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        st = {"types": m.group(1), "uris": m.group(3), "suites": m.group(4), "components": m.group(5)}
        for opt in (m.group(2) or "").strip("[] \t").split():
            if "=" in opt:
                k, v = opt.split("=", 1)
                st[{"signed-by": "signed-by", "arch": "architectures"}.get(k, k)] = v.replace(",", " ")
        out.append(st)
    return out


etc = os.path.join(root, "etc/apt")
stanzas = []
for path in [os.path.join(etc, "sources.list")] + sorted(glob.glob(os.path.join(etc, "sources.list.d/*.list"))):
    if os.path.isfile(path):
        stanzas += one_line(open(path).read())
for path in sorted(glob.glob(os.path.join(etc, "sources.list.d/*.sources"))):
    stanzas += deb822(open(path).read())

kept = []
for st in stanzas:
    if "deb" not in st.get("types", "").split() or st.get("enabled", "yes").lower() == "no":
        continue
    suites = [s for s in st.get("suites", "").split() if wanted.match(s)]
    if not suites or not st.get("uris"):
        continue
    lines = ["Types: deb", f"URIs: {st['uris']}", f"Suites: {' '.join(suites)}",
             f"Components: {st.get('components') or 'main'}"]
    if st.get("signed-by"):
        lines.append(f"Signed-By: {st['signed-by']}")
    kept.append("\n".join(lines))
if not kept:
    sys.exit(f"apt-sources.py: no 'deb' source for {suite} in {etc}; set SIGNET_APT_SOURCES to a sources file")
print("\n\n".join(kept))
