#!/usr/bin/env bash
# Instructions redis-server runs per call of each library, counted by
# callgrind: repeatable for the same binary and inputs whatever else the
# machine is doing, where INFO cpu on a shared 2-core machine moves by
# ±20 % between runs. Each library runs twice (n1 and n2 calls) on a
# fresh server under valgrind; the difference over n2-n1 is the cost of
# one call, start-up and loading cancelled out.
#   usage: bench/instr/run.sh [lib...]   (libs: redsem redis_rate semaphore contended contended8 redislock floor ping)
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
go build -o /tmp/redsem-instr .
n1=${N1:-1000} n2=${N2:-6000} port=${PORT:-6399}
total() { # lib n -> instructions of the whole server run
  local out=/tmp/redsem-instr.$1.$2
  valgrind --tool=callgrind --callgrind-out-file=$out redis-server --port $port --save '' --appendonly no >/dev/null 2>&1 &
  local vp=$!
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
  sleep 3 # past the restart quarantine's first seconds, which refuse grants
  /tmp/redsem-instr -lib "$1" -n "$2" -addr 127.0.0.1:$port >/dev/null
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  wait $vp || true
  callgrind_annotate $out 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
libs=("$@")
[ ${#libs[@]} -gt 0 ] || libs=(redsem redis_rate semaphore ping)
for lib in "${libs[@]}"; do
  a=$(total "$lib" "$n1"); b=$(total "$lib" "$n2")
  echo "$lib: $(( (b - a) / (n2 - n1) )) instructions per call"
done
