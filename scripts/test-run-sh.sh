#!/usr/bin/env bash
# Bad input to scripts/run.sh that it must refuse at once, in one line, with
# a non-zero exit, before building anything (README "The main job"): each
# check runs run.sh against a fresh data directory and looks at its exit
# status and its last line. Needs no model and builds nothing.
set -uo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
listener_pid=
trap '[ -z "$listener_pid" ] || kill "$listener_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

# A loopback port held by a listener for the duration of the checks.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(600)
' > "$tmp/port" &
listener_pid=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
busy=127.0.0.1:$(cat "$tmp/port")
free=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'not a model' > "$tmp/not.gguf"

passed=0 failed=0
check() { # name, expected text of the last line, env...
  local name=$1 expected=$2 status
  shift 2
  env CHATD_DATA_DIR="$tmp/data-$passed-$failed" "$@" timeout 60 scripts/run.sh > "$tmp/out" 2>&1
  status=$?
  local last
  last=$(tail -n 1 "$tmp/out")
  if [ "$status" = 1 ] && [[ "$last" == *"$expected"* ]] && ! grep -q 'building chatd' "$tmp/out"; then
    echo "PASS $name: $last"
    passed=$((passed + 1))
  else
    echo "FAIL $name: status $status, expected a last line with \"$expected\"; output:"
    sed 's/^/    /' "$tmp/out"
    failed=$((failed + 1))
  fi
}
check "chatd's port in use" "$busy is in use" CHATD_LISTEN="$busy" CHATD_MODEL_LISTEN="$free"
check "the model server's port in use" "$busy is in use" CHATD_LISTEN="$free" CHATD_MODEL_LISTEN="$busy"
check "missing weights file" "no such file" CHATD_LISTEN="$free" CHATD_MODEL_LISTEN="$free" CHATD_MODEL_GGUF="$tmp/missing.gguf"
check "weights file that is not GGUF" "is not a GGUF weights file" CHATD_LISTEN="$free" CHATD_MODEL_LISTEN="$free" CHATD_MODEL_GGUF="$tmp/not.gguf"
echo "run.sh bad input: $passed passed, $failed failed"
[ "$failed" = 0 ]
