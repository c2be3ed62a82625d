#!/usr/bin/env bash
# Builds signet's RPMs (binary and source) into OUTDIR:
#   packaging/rpm.sh OUTDIR
# from the committed HEAD of this repository (git archive makes
# signet-VERSION.tar.gz, the spec's Source0; uncommitted changes are not in
# it), with rpmbuild and packaging/rpm/signet.spec. %build compiles signet
# once, Release, tests off (RPM_BUILD_NCPUS sets the jobs, as rpm does).
#
# On a host without Fedora's macro packages (Debian: no systemd-rpm-macros
# or cmake macros) packaging/rpm/macros.compat supplies them, and the
# BuildRequires, which name Fedora packages, are not checked (--nodeps):
# Debian's own -dev packages (packaging/deps.sh) are what the build uses.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
spec=$src/packaging/rpm/signet.spec
version=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")

top=$(mktemp -d "${TMPDIR:-/tmp}/signet-rpm.XXXXXX")
trap 'rm -rf "$top"' EXIT
mkdir -p "$top"/{SOURCES,SPECS,BUILD,BUILDROOT}
tarball=$top/SOURCES/signet-$version.tar.gz
git -C "$src" archive --format=tar.gz --prefix="signet-$version/" -o "$tarball" HEAD
# The spec and its other sources as committed, like the code.
tar -xzf "$tarball" -C "$top/SOURCES" --strip-components=3 "signet-$version/packaging/rpm"
mv "$top/SOURCES/signet.spec" "$top/SPECS/"

args=(--define "_topdir $top" --define "_rpmdir $out" --define "_srcrpmdir $out"
      --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm")
if [ -z "$(rpm --eval '%{?_unitdir}')" ]; then
  args+=(--load "$top/SOURCES/macros.compat" --nodeps)
fi
rpmbuild -ba "${args[@]}" "$top/SPECS/signet.spec"
ls "$out"/*.rpm
