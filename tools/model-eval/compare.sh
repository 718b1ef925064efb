#!/usr/bin/env bash
# Scores candidate models and sampling settings on the prompt set (issue 34;
# the figures in docs/local-model.md "Choosing the model" come from it).
#
#   tools/model-eval/compare.sh NAME=WEIGHTS.gguf [NAME=WEIGHTS.gguf ...]
#
# For each model: starts llama-server (the one scripts/run.sh built, or
# $LLAMA_SERVER) on $EVAL_LISTEN (default 127.0.0.1:8099, not run.sh's
# ports) the way run.sh does (--jinja, the same context and threads) plus
# $EXTRA_SERVER_ARGS, then runs tools/model-eval/score.py once per sampling
# setting below, with the setting's fields in every request (what run.sh
# passes as llama-server options and chatd sends as `temperature`), and
# stops the server. One model server at a time. Output: score.py's lines,
# and a table of the totals at the end; every answer in $OUT
# (default /tmp/model-eval)/<model>-<setting>.json.
#
# Settings (SETTINGS=name,name to run some): baseline is what run.sh used
# before issue 34 (llama-server's defaults, temperature 0.3 from chatd).
set -euo pipefail
cd "$(dirname "$0")/../.."

data_dir=${CHATD_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/chatd}
server=${LLAMA_SERVER:-$(ls -d "$data_dir"/llm/llama-cpp-*/bin/llama-server 2>/dev/null | tail -n 1)}
[ -x "$server" ] || { echo "no llama-server: run scripts/run.sh once or set LLAMA_SERVER" >&2; exit 2; }
listen=${EVAL_LISTEN:-127.0.0.1:8099}
out=${OUT:-/tmp/model-eval}
seeds=${SEEDS:-1,2}
threads=${THREADS:-$(($(nproc) > 1 ? $(nproc) - 1 : 1))}
mkdir -p "$out"
[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 2; }

declare -A settings=(
  [baseline]="temperature=0.3"
  [repeat]="temperature=0.3 repeat_penalty=1.15 repeat_last_n=256"
  [dry]="temperature=0.3 dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=4096"
  [dry-repeat]="temperature=0.3 dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=4096 repeat_penalty=1.1 repeat_last_n=256"
  [dry-warm]="temperature=0.7 top_p=0.9 min_p=0.1 dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=4096 repeat_penalty=1.1 repeat_last_n=256"
)
order=(baseline repeat dry dry-repeat dry-warm)
[ -z "${SETTINGS:-}" ] || IFS=, read -r -a order <<< "$SETTINGS"

server_pid=
trap '[ -z "$server_pid" ] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }' EXIT
summary=()
for spec in "$@"; do
  name=${spec%%=*} gguf=${spec#*=}
  [ -f "$gguf" ] || { echo "$gguf: no such file" >&2; exit 2; }
  echo "== $name: $gguf"
  # shellcheck disable=SC2086
  "$server" --model "$gguf" --alias "$name" --host "${listen%:*}" --port "${listen##*:}" \
    --ctx-size 16384 --parallel 2 --threads "$threads" --jinja --no-webui ${EXTRA_SERVER_ARGS:-} \
    > "$out/$name-server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    curl -fsS -o /dev/null "http://$listen/health" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { tail -n 20 "$out/$name-server.log" >&2; exit 1; }
    sleep 0.2
  done
  for setting in "${order[@]}"; do
    params=()
    for kv in ${settings[$setting]}; do params+=(--param "$kv"); done
    echo "-- $name / $setting: ${settings[$setting]}"
    python3 tools/model-eval/score.py --url "http://$listen" --model "$name" --seeds "$seeds" \
      --label "$name/$setting" --json "$out/$name-$setting.json" "${params[@]}" | tee "$out/$name-$setting.txt"
    summary+=("$(tail -n 1 "$out/$name-$setting.txt")")
  done
  kill "$server_pid" && wait "$server_pid" 2>/dev/null || true
  server_pid=
done
echo "== totals"
printf '%s\n' "${summary[@]}"
