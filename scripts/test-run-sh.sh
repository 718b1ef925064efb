#!/usr/bin/env bash
# scripts/run.sh without a model (README "The main job"):
#
# 1. bad input it must refuse at once, in one line, with a non-zero exit,
#    before building anything: each check runs run.sh against a fresh data
#    directory and looks at its exit status and its last line;
# 2. how it stops, with stand-ins for chatd and llama-server
#    (scripts/fakes/, given by CHATD_BIN and CHATD_MODEL_SERVER, so nothing
#    is built; the stand-ins exit 0 on SIGINT like llama-server): Ctrl-C (a
#    SIGINT to run.sh's whole process group, as a terminal sends it) and
#    SIGTERM (to run.sh alone) while serving stop both servers with SIGTERM,
#    print one line and exit 0; CHATD_RUN_EXIT=1 stops the same way without
#    printing the serving notes; a model server that dies by itself (SIGKILL)
#    is reported with its log and a non-zero exit.
set -uo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
listener_pid=
run_pid=
trap '[ -z "$listener_pid" ] || kill "$listener_pid" 2>/dev/null; [ -z "$run_pid" ] || kill -KILL -- "-$run_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

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

# --- stopping, with the stand-ins ------------------------------------------
printf 'GGUF fake weights' > "$tmp/fake.gguf"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
run_pid=
# Starts run.sh in the background in a process group of its own (as a shell
# runs a foreground job), with SIGINT at its default (a non-interactive
# shell's `&` would ignore it), against the stand-ins; output in $tmp/out.
start_run() { # name, env...
  local name=$1
  shift
  rm -rf "$tmp/pids" "$tmp/out" && mkdir -p "$tmp/pids"
  env CHATD_DATA_DIR="$tmp/data-$name" CHATD_LISTEN="127.0.0.1:$(free_port)" \
    CHATD_MODEL_LISTEN="127.0.0.1:$(free_port)" CHATD_MODEL_GGUF="$tmp/fake.gguf" \
    CHATD_BIN="$PWD/scripts/fakes/chatd" CHATD_MODEL_SERVER="$PWD/scripts/fakes/llama-server" \
    FAKE_PID_DIR="$tmp/pids" "$@" \
    python3 -c 'import os, signal, sys; os.setpgid(0, 0); signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    scripts/run.sh > "$tmp/out" 2>&1 &
  run_pid=$!
}
# Waits up to `seconds` for run.sh to exit; its status in $run_status (124
# when it did not exit, and then it is killed).
wait_run() { # seconds
  local deadline=$((SECONDS + $1))
  while kill -0 "$run_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if kill -0 "$run_pid" 2>/dev/null; then
    kill -KILL -- "-$run_pid" 2>/dev/null
    wait "$run_pid" 2>/dev/null
    run_status=124
  else
    run_status=0
    wait "$run_pid" || run_status=$?
  fi
}
wait_serving() { # seconds: until run.sh printed its serving notes
  local deadline=$((SECONDS + $1))
  until grep -q 'chatd is serving' "$tmp/out" 2>/dev/null; do
    kill -0 "$run_pid" 2>/dev/null && [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}
# The stand-ins' processes still running ("" when none).
leftovers() {
  local f
  for f in "$tmp"/pids/*.pid; do
    [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && echo -n "$(basename "$f" .pid) "
  done
  true
}
verdict() { # name, ok (0/1), what was expected
  if [ "$2" = 0 ]; then
    echo "PASS $1: $(tail -n 1 "$tmp/out")"
    passed=$((passed + 1))
  else
    echo "FAIL $1: status $run_status, expected $3; output:"
    sed 's/^/    /' "$tmp/out"
    for f in "$tmp"/data-*/chatd.log "$tmp"/data-*/llm/model-server.log; do
      [ -f "$f" ] && { echo "    --- $f"; sed 's/^/    /' "$f"; }
    done
    failed=$((failed + 1))
  fi
}
# A stop that was asked for: exit 0; after the serving notes exactly one
# line, "chatd and the model server stopped."; no log printed; both
# stand-ins stopped by run.sh's SIGTERM (not the terminal's SIGINT); none
# left running.
check_stop() { # name, signal, target (group|pid)
  local name=$1 sig=$2 target=$3 ok=1 data
  start_run "$name"
  if wait_serving 60; then
    if [ "$target" = group ]; then kill "-$sig" -- "-$run_pid"; else kill "-$sig" "$run_pid"; fi
    wait_run 60
    data=$tmp/data-$name
    local after
    after=$(sed -n '/^Ctrl-C stops chatd/,$p' "$tmp/out" | tail -n +2)
    if [ "$run_status" = 0 ] && [ "$after" = "chatd and the model server stopped." ] \
      && ! grep -q 'last lines of' "$tmp/out" \
      && grep -qx 'stopped by SIGTERM' "$data/chatd.log" \
      && grep -qx 'stopped by SIGTERM' "$data/llm/model-server.log" \
      && [ -z "$(leftovers)" ]; then
      ok=0
    fi
  else
    wait_run 1
  fi
  verdict "$name" "$ok" "exit 0 and one line after the serving notes, both servers stopped by SIGTERM (left running: $(leftovers))"
}
check_stop "Ctrl-C while serving" INT group
check_stop "SIGTERM while serving" TERM pid

# CHATD_RUN_EXIT=1: the first reply, then the same stop, without the
# serving notes.
start_run run-exit CHATD_RUN_EXIT=1
wait_run 60
ok=1
if [ "$run_status" = 0 ] && [ "$(tail -n 1 "$tmp/out")" = "chatd and the model server stopped." ] \
  && grep -q 'assistant> OK' "$tmp/out" && ! grep -qE 'web UI:|admin token:|Ctrl-C stops' "$tmp/out" \
  && [ -z "$(leftovers)" ]; then
  ok=0
fi
verdict "CHATD_RUN_EXIT=1" "$ok" "exit 0, the reply, no serving notes, last line \"chatd and the model server stopped.\""

# A real failure: the model server killed while serving is reported with
# its log, chatd is stopped, and the exit is non-zero.
start_run model-dies
ok=1
if wait_serving 60; then
  kill -KILL "$(cat "$tmp/pids/model-server.pid")"
  wait_run 60
  if [ "$run_status" = 1 ] && grep -q 'last lines of' "$tmp/out" \
    && tail -n 1 "$tmp/out" | grep -q 'the model server exited (status 137)' \
    && [ -z "$(leftovers)" ]; then
    ok=0
  fi
else
  wait_run 1
fi
verdict "the model server dies by itself" "$ok" "exit 1 with its log and \"the model server exited (status 137)\""

echo "run.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
