#!/bin/sh
# aiopdbp emulated cluster: hydra's -launcher-exec (see aiopdbp/launch/emulate.py).
#
# hydra calls it like ssh:  emulate_exec.sh [-x ...] HOST COMMAND...
# where HOST is an emulated host's address and COMMAND is one shell command
# line (hydra quotes it for a remote shell, so it is run with `sh -c`, as sshd
# would).  The job's address -> namespace table comes from mpiexec's
# environment (AIOPDBP_EMULATE_HOSTS="addr=netns ..."), so two jobs never see
# each other's hosts.  The command runs inside the host's network namespace,
# with its own hostname (the namespace's name) when `unshare` is available.
set -u
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "aiopdbp emulate_exec: usage: emulate_exec.sh [-x] HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
ns=
for pair in ${AIOPDBP_EMULATE_HOSTS:-}; do
    case "$pair" in
        "$host="*) ns=${pair#*=} ;;
    esac
done
if [ -z "$ns" ]; then
    echo "aiopdbp emulate_exec: $host is not a host of this emulated cluster" >&2
    exit 255
fi
ip=${AIOPDBP_EMULATE_IP:-ip}
unshare=${AIOPDBP_EMULATE_UNSHARE:-}
if [ -n "$unshare" ]; then
    # $ns is [a-z0-9-] only (made by emulate.py), safe inside the command line
    exec "$ip" netns exec "$ns" "$unshare" --uts sh -c "hostname $ns && exec sh -c \"\$0\"" "$*"
fi
exec "$ip" netns exec "$ns" sh -c "$*"
