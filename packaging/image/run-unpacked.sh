#!/bin/sh
# Runs a program of signet's image from its unpacked root file system the
# way a container runtime would, without one: as the image's user, on the
# root made read-only, with STATE as the volume /var/lib/signet.
#
#   unshare -m packaging/image/run-unpacked.sh ROOTFS STATE PROGRAM [ARGS...]
#
# ROOTFS is what `umoci unpack --image OUTDIR/oci:latest BUNDLE` writes to
# BUNDLE/rootfs; STATE a folder owned by 65532 (an empty volume). Root
# only, and only in a mount namespace of its own (`unshare -m`: the mounts
# below are private to it and end with its last process). Each step execs
# the next, so the caller's pid is the program's and its signals reach the
# program directly. The host's network is used as it is (ports on
# loopback). The tests (tests/packaging/test_image.py) and the benchmark
# (perf/packagebench.py) run the image this way.
set -eu
[ $# -ge 3 ] || { echo "usage: unshare -m $0 ROOTFS STATE PROGRAM [ARGS...]" >&2; exit 2; }
mnt=$1 state=$2; shift 2
uid=65532
mount --bind "$mnt" "$mnt"
mount -o remount,bind,ro,nosuid,nodev "$mnt"
mount -t tmpfs -o mode=0755,size=64k,nosuid tmpfs "$mnt/dev"
for d in null zero random urandom; do
  touch "$mnt/dev/$d"
  mount --bind "/dev/$d" "$mnt/dev/$d"
done
mount -o remount,bind,ro "$mnt/dev"
mount -t proc -o nosuid,nodev,noexec proc "$mnt/proc"
mount --bind "$state" "$mnt/var/lib/signet"
if touch "$mnt/.rw-probe" 2>/dev/null; then echo "run-unpacked.sh: the image root is writable" >&2; exit 99; fi
exec chroot --userspec=$uid:$uid "$mnt" "$@"
