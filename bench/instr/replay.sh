#!/usr/bin/env bash
# Instructions redis-server runs per contended acquisition, replayed: the
# contended8 probe (eight Clients, seven queued behind each lease) runs
# once against a plain redis-server under MONITOR; its FCALLs are then
# sent again, in the same order, by one redis-cli to a fresh server under
# callgrind, and the last 400 acquisitions counted. run.sh's contended
# probes move by ±10k between runs (keep-alives follow the wall clock,
# which valgrind stretches); a replay is the same sequence every time, so
# two commits compare to within a few hundred instructions. Releases are
# replayed with token '' (any): the tokens come from the clock.
# Also prints the part inside FCALL (fcallCommand), and of it the Redis
# commands the scripts call (scriptCall) and the turning of their replies
# into Lua values (parseReply).
#   usage: bench/instr/replay.sh   (needs valgrind)
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
go build -o /tmp/redsem-instr .
port=${PORT:-6398} tmp=$(mktemp -d)
redis-server --port $port --save '' --appendonly no --daemonize yes >/dev/null
for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
(timeout 60 redis-cli -p $port monitor >$tmp/monitor 2>/dev/null || true) &
sleep 0.5
/tmp/redsem-instr -lib contended8 -n 400 -addr 127.0.0.1:$port >/dev/null
sleep 0.5
redis-cli -p $port --raw function list withcode | awk '/^#!lua name=redsem/ {p = 1} p' >$tmp/lib.lua
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
wait
# The FCALLs after the library's load (those before it failed), the
# releases' tokens (argument 9 of the line) made ''.
from=$(grep -n -m1 '"function" "load"' $tmp/monitor | cut -d: -f1)
tail -n +"$from" $tmp/monitor | grep -v '\[0 lua\]' | grep '"fcall"' |
  sed -E 's/^[0-9.]+ \[[0-9]+ [^]]+\] //' |
  awk '$2 ~ /_release"$/ {$9 = "\"\""} {print}' >$tmp/cmds
n=$(wc -l <$tmp/cmds) warm=$((n - 800))
valgrind --tool=callgrind --callgrind-out-file=$tmp/cg.%p redis-server --port $port --save '' --appendonly no >/dev/null 2>&1 &
for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
vpid=$(pgrep -f "valgrind.*--port $port " | head -1)
redis-cli -p $port -x function load replace <$tmp/lib.lua >/dev/null
head -n $warm $tmp/cmds | redis-cli -p $port >/dev/null
callgrind_control -z "$vpid" >/dev/null 2>&1
tail -n +$((warm + 1)) $tmp/cmds | redis-cli -p $port >/dev/null
callgrind_control -d "$vpid" >/dev/null 2>&1
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
wait
out=$(ls -t $tmp/cg.*.1 2>/dev/null | head -1)
# The whole server's count moves with the machine's load (serverCron runs
# by the wall clock): compare inside FCALL.
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk '
  /PROGRAM TOTALS/ {gsub(",", "", $1); printf "per contended acquisition: %d instructions, whole server\n", $1 / 400}
  /:(fcallCommand|scriptCall|parseReply) / {
    n = $1; gsub(",", "", n)
    for (i = 2; i <= NF; i++) if ($i ~ /^\?\?\?:/) { f = $i; sub(/.*:/, "", f) }
    printf "  %s %d\n", f, n / 400
  }'
rm -rf "$tmp"
