#!/bin/sh
# knee's lifeline for a node on an ssh host (docs/hosts.md, "SSH hosts"). POSIX sh only.
#   sh lifeline.sh KNEE_NODE ARGS...   runs the node; exits with its exit code
#   sh lifeline.sh --stop-all          stops every node started from this folder
# The node's stdout and stderr are this script's, i.e. the ssh channel's. Of its own, the
# script prints only `{"event": "usage", "cpu_s", "rss_bytes"}` lines, once a second, so the
# runner sees the remote node's CPU time and memory. It reads this script's stdin (the
# runner's pipe, through ssh): TERM, KILL, STOP or CONT, one a line, is sent to the node; end
# of input (the runner closed it, or the connection was lost and sshd closed the channel)
# stops the node: SIGTERM, then SIGKILL after GRACE_S.
GRACE_S=3
here=$(cd "$(dirname "$0")" && pwd -P)

# Sends TERM to the node $1, then KILL if it is still there after GRACE_S.
stop_node() {
    kill -s TERM "$1" 2>/dev/null || return 0
    i=0
    while [ "$i" -lt $((GRACE_S * 10)) ] && kill -0 "$1" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -s KILL "$1" 2>/dev/null || true
}

if [ "${1:-}" = "--stop-all" ]; then
    # Every node started here is registered as nodes/PID while it runs (teardown).
    # A registration outlives a node only if its lifeline was killed: the pid is stopped
    # only while it is still this folder's knee-node (pids are reused).
    for f in "$here"/nodes/*; do
        [ -e "$f" ] || continue
        pid=${f##*/}
        [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$here/knee-node" ] || continue
        stop_node "$pid" &
    done
    wait
    exit 0
fi

"$@" </dev/null &
node=$!
mkdir -p "$here/nodes" && : >"$here/nodes/$node"

# Usage: utime + stime (fields 14, 15 of /proc/PID/stat, after the parenthesised name) in
# clock ticks, VmRSS in kB.
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
(
    set -f
    while read -r stat <"/proc/$node/stat" 2>/dev/null; do
        set -- ${stat##*\) }
        ticks=$((${12} + ${13}))
        rss_kb=0
        while read -r key value _; do
            [ "$key" = "VmRSS:" ] && rss_kb=$value
        done <"/proc/$node/status"
        cs=$((ticks * 100 / hz))
        printf '{"event": "usage", "cpu_s": %d.%02d, "rss_bytes": %d}\n' \
            $((cs / 100)) $((cs % 100)) $((rss_kb * 1024))
        sleep 1 </dev/null >/dev/null 2>&1
    done
) 2>/dev/null &
reporter=$!

# The control channel. An asynchronous list reads /dev/null unless told otherwise, hence <&3.
exec 3<&0
(
    while read -r word; do
        case $word in
        TERM | KILL | STOP | CONT) kill -s "$word" "$node" 2>/dev/null ;;
        esac
    done
    stop_node "$node"
) <&3 >/dev/null 2>&1 &
control=$!
exec 3<&- 0</dev/null

# The shell reports a node killed by a signal on stderr: once the channel is gone, that write
# must not kill this script before it unregisters the node (set after the children started,
# who keep the default).
trap '' PIPE
wait "$node"
code=$?
rm -f "$here/nodes/$node"
kill "$reporter" "$control" 2>/dev/null
exit "$code"
