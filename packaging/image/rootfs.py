#!/usr/bin/python3
"""Assembles the image's root file system from a staging root (Debian
packages extracted by mmdebstrap) by inclusion, not by deletion: only the
programs given, the PKCS#11 modules kept, and the shared libraries they
load (DT_NEEDED, transitively, resolved inside the staging root the way
ld.so would, with every symlink on the way) are copied. So no shell, no
package manager and no dpkg database can be left behind by accident, and
a library a binary needs but the packages lack fails the build here, not
at the container's first start.

For license notices and for scanners, every Debian package that
contributed a file keeps its /usr/share/doc/PKG/copyright, and
/usr/share/doc/signet-image/packages lists "name version" of each (it is
not a dpkg database: nothing reads it but people and tools told to).

usage: rootfs.py --stage DIR --out DIR --debs DIR --triplet T
                 [--add SRC:DEST]... [--keep PATH]... [--keep-package NAME]...
  --add   a file of the host (signet's programs) copied to DEST, mode 0755
  --keep  a path inside the staging root to copy (a module: its libraries too)
  --debs  the folder holding the .deb files mmdebstrap extracted (for the
          package of each file); --deb-list FILE names them, one per line
"""
import argparse
import os
import shutil
import stat
import subprocess
import sys


def needed(path):
    """DT_NEEDED and DT_RUNPATH/DT_RPATH of an ELF file, or None if it is not
    ELF (readelf from binutils)."""
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return None
    out = subprocess.run(["readelf", "-dW", path], check=True, capture_output=True, text=True).stdout
    libs, runpath = [], []
    for line in out.splitlines():
        if "(NEEDED)" in line:
            libs.append(line.split("[", 1)[1].rstrip("]"))
        elif "(RUNPATH)" in line or "(RPATH)" in line:
            runpath += line.split("[", 1)[1].rstrip("]").split(":")
    return libs, runpath


class Root:
    def __init__(self, top):
        self.top = os.path.abspath(top)

    def host(self, rel):
        return os.path.join(self.top, rel.lstrip("/"))

    def resolve(self, rel, chain):
        """The real path (relative to the root) of rel, following symlinks
        inside the root only; every symlink passed is added to chain."""
        parts = [p for p in rel.strip("/").split("/") if p]
        done = []
        hops = 0
        while parts:
            name = parts.pop(0)
            if name == "..":
                if done:
                    done.pop()
                continue
            if name == ".":
                continue
            cur = "/".join(done + [name])
            h = self.host(cur)
            if os.path.islink(h):
                hops += 1
                if hops > 40:
                    raise RuntimeError(f"symlink loop at {cur}")
                chain.add(cur)
                target = os.readlink(h)
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/") if p] + parts
            else:
                done.append(name)
        return "/".join(done)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--debs", required=True)
    ap.add_argument("--deb-list", required=True)
    ap.add_argument("--triplet", required=True)
    ap.add_argument("--add", action="append", default=[])
    ap.add_argument("--keep", action="append", default=[])
    ap.add_argument("--keep-package", action="append", default=[])
    a = ap.parse_args()

    stage, out = Root(a.stage), Root(a.out)
    search = [f"lib/{a.triplet}", f"usr/lib/{a.triplet}", "lib", "usr/lib"]
    take = set()  # paths relative to the staging root: files and symlinks
    todo = []  # (host path of an ELF file, its origin dir inside the root)

    for spec in a.add:
        src, dest = spec.split(":", 1)
        h = out.host(dest)
        os.makedirs(os.path.dirname(h), exist_ok=True)
        shutil.copyfile(src, h)
        os.chmod(h, 0o755)
        todo.append((h, os.path.dirname(dest)))
    for rel in a.keep:
        chain = set()
        real = stage.resolve(rel, chain)
        if not os.path.isfile(stage.host(real)):
            sys.exit(f"rootfs.py: {rel} is not in the staged packages")
        take |= chain | {real}
        todo.append((stage.host(real), os.path.dirname(real)))

    seen = set()
    missing = []
    while todo:
        path, origin = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        info = needed(path)
        if info is None:
            continue
        libs, runpath = info
        dirs = [d.replace("$ORIGIN", "/" + origin).lstrip("/") for d in runpath] + search
        for lib in libs:
            for d in dirs:
                chain = set()
                rel = f"{d}/{lib}"
                if not os.path.lexists(stage.host(rel)):
                    continue
                real = stage.resolve(rel, chain)
                if os.path.isfile(stage.host(real)):
                    take |= chain | {real}
                    todo.append((stage.host(real), os.path.dirname(real)))
                    break
            else:
                missing.append(f"{lib} (needed by {path})")
    # The program interpreter: /lib64/ld-linux-x86-64.so.2 and its target.
    for path in list(seen):
        interp = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
        for line in interp.splitlines():
            if "[Requesting program interpreter:" in line:
                rel = line.split(":", 1)[1].strip(" ]")
                chain = set()
                real = stage.resolve(rel, chain)
                if not os.path.isfile(stage.host(real)):
                    missing.append(f"interpreter {rel}")
                take |= chain | {real}
    if missing:
        sys.exit("rootfs.py: not in the staged packages: " + ", ".join(sorted(set(missing))))

    for rel in sorted(take):
        src, dst = stage.host(rel), out.host(rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)

    # Which package each taken file came from, from the .deb files.
    pkgs = {}
    with open(a.deb_list) as f:
        debs = [l.strip() for l in f if l.strip().endswith(".deb")]
    wanted = {"/" + r for r in take}
    for deb in debs:
        path = os.path.join(a.debs, deb)
        fields = subprocess.run(["dpkg-deb", "-f", path, "Package", "Version"], check=True, capture_output=True,
                                text=True).stdout.splitlines()
        name, version = (l.split(": ", 1)[1] for l in fields)
        listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", path], check=True, capture_output=True).stdout
        files = subprocess.run(["tar", "-t"], input=listing, check=True, capture_output=True).stdout
        names = {"/" + n.lstrip("./").rstrip("/") for n in files.decode().splitlines()}
        if name in a.keep_package or names & wanted:
            pkgs[name] = version
    doc = out.host("usr/share/doc")
    for name in sorted(pkgs):
        src = stage.host(f"usr/share/doc/{name}/copyright")
        if os.path.isfile(src):
            os.makedirs(os.path.join(doc, name), exist_ok=True)
            shutil.copy2(src, os.path.join(doc, name, "copyright"))
    os.makedirs(os.path.join(doc, "signet-image"), exist_ok=True)
    with open(os.path.join(doc, "signet-image", "packages"), "w") as f:
        f.write("# Debian packages whose files this image holds (name version)\n")
        for name in sorted(pkgs):
            f.write(f"{name} {pkgs[name]}\n")
    print(f"rootfs.py: {len(take)} files and links from {len(pkgs)} packages", file=sys.stderr)


if __name__ == "__main__":
    main()
