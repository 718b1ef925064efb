#!/usr/bin/env bash
# The main job, long (issue 13): a 60-turn conversation with the default local
# model through the CLI, across automatic compactions.
#
#   scripts/long-conversation.sh            # 60 turns (TURNS=N for another count)
#
# It starts scripts/run.sh in the background (installing the local model on a
# first start, as run.sh does) with a context window of CONTEXT tokens for
# the model config (default 4096, half the model server's slot, so that
# compactions come every few turns; run.sh's CHATD_MODEL_CONTEXT), waits
# until chatd is ready, creates one chat and sends TURNS messages to it one
# after another with `chatd chat send`, each asking for a paragraph of about
# 150 words, each waiting for its reply. After every turn it reads the chat
# and prints one line:
#
#   turn=30 wall_s=12.4 status=waiting prompt_tokens=3120 context_tokens=3301 \
#     context_percent=40 estimated=false compactions=2
#
# `prompt_tokens` is the whole prompt the model server reported for the
# turn's last model call, cached part included (`-` when it reports none); `context_*` and
# `compactions` come from `Chat.context`. A turn that does not end in
# `waiting` fails the run (exit 1) after printing the chat's last error; at
# the end it prints a summary (turns, compactions, peak context percent, wall
# time per turn p50 and max) and stops the servers; fewer than
# MIN_COMPACTIONS automatic compactions (default: one per 10 turns, at most
# 3) also fail the run. The run's other settings are run.sh's
# (CHATD_DATA_DIR, CHATD_LISTEN, CHATD_BIN, ...); a CSV of the per-turn lines
# is written to $CHATD_DATA_DIR/long-conversation.csv.
set -euo pipefail
cd "$(dirname "$0")/.."

turns=${TURNS:-60}
case $turns in '' | *[!0-9]*) echo "TURNS must be a positive integer, not '$turns'" >&2; exit 2 ;; esac
[ "$turns" -ge 1 ] || { echo "TURNS must be at least 1" >&2; exit 2; }
context=${CONTEXT:-4096}
case $context in '' | *[!0-9]*) echo "CONTEXT must be a positive integer, not '$context'" >&2; exit 2 ;; esac
min_compactions=${MIN_COMPACTIONS:-$((turns / 10 < 3 ? turns / 10 : 3))}
data_dir=${CHATD_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/chatd}
listen=${CHATD_LISTEN:-127.0.0.1:3000}
export CHATD_URL=http://$listen
chatd=${CHATD_BIN:-target/release/chatd}
log=$data_dir/long-conversation-run.log
csv=$data_dir/long-conversation.csv
mkdir -p "$data_dir"

echo "== starting scripts/run.sh in the background (log: $log)"
CHATD_MODEL_CONTEXT=$context scripts/run.sh > "$log" 2>&1 &
run_pid=$!
cleanup() {
  kill -TERM "$run_pid" 2>/dev/null || true
  wait "$run_pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# run.sh prints its closing "chatd is serving" block once the first reply is
# done; until then a first start may be installing the model (up to an hour).
until grep -q 'chatd is serving with the local model' "$log" 2>/dev/null; do
  if ! kill -0 "$run_pid" 2>/dev/null; then
    echo "run.sh stopped before chatd was ready; its log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  sleep 2
done
export CHATD_TOKEN
CHATD_TOKEN=$(cat "$data_dir/admin-token")
echo "== chatd is ready at $CHATD_URL"

api() { # path
  curl -fsS -H "Authorization: Bearer $CHATD_TOKEN" "$CHATD_URL/api/v2$1"
}

# Topics the turns go through; every turn asks for a paragraph (so the
# history grows by a few hundred tokens a turn, whatever the model) and
# names its number, so a summary has something concrete to carry over.
topics=(PostgreSQL Rust "the TCP handshake" "B-tree indexes" "write-ahead logging" "the CAP theorem"
  "garbage collection" "HTTP/2" "consistent hashing" "Unicode normalisation" "TLS certificates"
  "the Raft protocol")
message_for() { # turn
  local n=$1 topic=${topics[$((($1 - 1) % ${#topics[@]}))]}
  echo "Turn $n. Write a paragraph of about 150 words about $topic: what it is, how it works and why it matters. End with the turn number."
}

chat_id=$("$chatd" chat new --no-watch --json --title "Long conversation ($turns turns)" "$(message_for 1)" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
echo "== chat $chat_id"
echo "turn,wall_s,status,prompt_tokens,context_tokens,context_percent,estimated,compactions" > "$csv"

report_turn() { # turn wall_s
  api "/chats/$chat_id" > "$data_dir/long-conversation-chat.json"
  api "/chats/$chat_id/messages?limit=20" > "$data_dir/long-conversation-page.json"
  python3 - "$1" "$2" "$data_dir/long-conversation-chat.json" "$data_dir/long-conversation-page.json" "$csv" <<'EOF'
import json, sys
turn, wall, chat_path, page_path, csv = sys.argv[1:]
chat = json.load(open(chat_path))
page = json.load(open(page_path))
prompt = "-"
for m in reversed(page["messages"]):
    if m["role"] == "assistant" and (m.get("usage") or {}).get("input_tokens") is not None:
        tool_names = [p.get("tool_name") for p in m["content"] if p["type"] == "tool-call"]
        if "chatd_compact" in tool_names:
            continue
        # The whole prompt: llama.cpp reports the part it had cached
        # separately (cache_read_tokens).
        u = m["usage"]
        prompt = (u.get("input_tokens") or 0) + (u.get("cache_read_tokens") or 0) + (u.get("cache_creation_tokens") or 0)
        break
ctx = chat.get("context") or {}
row = [turn, wall, chat["status"], prompt, ctx.get("tokens", "-"), ctx.get("percent", "-"),
       str(ctx.get("estimated", "-")).lower(), ctx.get("compactions", "-")]
print("turn={} wall_s={} status={} prompt_tokens={} context_tokens={} context_percent={} estimated={} compactions={}".format(*row))
open(csv, "a").write(",".join(map(str, row)) + "\n")
if chat["status"] != "waiting":
    print("the turn ended in {}: {}".format(chat["status"], json.dumps(chat.get("last_error"))), file=sys.stderr)
    sys.exit(1)
EOF
}

started=$(date +%s.%N)
"$chatd" chat watch --once "$chat_id" > /dev/null
report_turn 1 "$(python3 -c "import time; print(round(time.time() - $started, 1))")"
for turn in $(seq 2 "$turns"); do
  started=$(date +%s.%N)
  "$chatd" chat send "$chat_id" "$(message_for "$turn")" > /dev/null || true
  report_turn "$turn" "$(python3 -c "import time; print(round(time.time() - $started, 1))")"
done

python3 - "$csv" "$context" "$min_compactions" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
context, wanted = int(sys.argv[2]), int(sys.argv[3])
walls = sorted(float(r["wall_s"]) for r in rows)
percents = [int(r["context_percent"]) for r in rows if r["context_percent"].isdigit()]
compactions = int(rows[-1]["compactions"]) if rows[-1]["compactions"].isdigit() else 0
at = [r["turn"] for prev, r in zip(rows, rows[1:]) if prev["compactions"] != r["compactions"]]
if rows[0]["compactions"] not in ("0", "-"):
    at.insert(0, rows[0]["turn"])
print("== {} turns, all waiting; compactions={} (at turns {}); context window {} tokens, peak {}%; "
      "wall time per turn p50={:.1f}s max={:.1f}s".format(
    len(rows), compactions, ", ".join(at) or "-", context, max(percents, default=0),
    statistics.median(walls), walls[-1]))
for n in (5, 30, 60):
    if n <= len(rows):
        print("   prompt tokens at turn {}: {}".format(n, rows[n - 1]["prompt_tokens"]))
if compactions < wanted:
    print("FAIL: {} automatic compactions, fewer than the {} wanted (MIN_COMPACTIONS)".format(compactions, wanted),
          file=sys.stderr)
    sys.exit(1)
EOF
