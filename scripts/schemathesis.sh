#!/usr/bin/env bash
# The API against its own OpenAPI document (issue 32, point 8): schemathesis,
# run from outside against a live `chatd serve`, with every check and 30
# examples per operation; any failure fails the script.
#
#   scripts/schemathesis.sh                 # the whole document
#   scripts/schemathesis.sh --include-path-regex '/files'   # extra arguments go to `schemathesis run`
#
# It installs schemathesis $SCHEMATHESIS_VERSION (pinned below) from PyPI into
# a virtualenv under the workspace's target dir (git-ignored; installing
# python3-venv from Debian's packages when `python3 -m venv` is missing and
# we are root), builds `chatd` and `fake-llm` (debug), creates a database on
# the server of CHATD_TEST_DATABASE_URL (default: the local one of
# scripts/ensure-postgres.sh), starts fake-llm (echo mode) and chatd with a
# bootstrap admin token, waits for /readyz, runs schemathesis with that token,
# and always stops both and drops the database.
#
# Three routes are left out: the WebSocket stream (it answers nothing but a
# WebSocket handshake, which is no request/response), the Server-Sent Events
# stream and the replica-to-replica parts relay (they hold the connection
# open by design, which a request/response fuzzer reads as a timeout). The
# long poll is in; its `wait_ms` may reach 60 s: hence a response time limit
# of 70 s. The copies
# of the chat routes under /api/experimental/chats are left out too: the same
# handlers and the same document entries (crates/chatd-api/src/openapi.rs,
# `ExperimentalMount`).
#
# CHATD_PREPARE_ONLY=1 only installs schemathesis (its venv) and exits 0:
# scripts/test.sh does that while cargo builds.
#
# Output, and the JUnit report, go to $SCHEMATHESIS_ARTIFACTS_DIR (default
# target/schemathesis-artifacts, emptied at the start) with the chatd log.
# Exit status: schemathesis's (0 only when there was no failure of any kind).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/live-server.sh
source scripts/lib/live-server.sh
live_init schemathesis

SCHEMATHESIS_VERSION=4.32.5
artifacts="${SCHEMATHESIS_ARTIFACTS_DIR:-$live_target_dir/schemathesis-artifacts}"
venv="$live_target_dir/schemathesis/venv-$SCHEMATHESIS_VERSION"

log() { live_log "$@"; }
die() { live_die "$@"; }

# ---- prerequisites ----------------------------------------------------------

command -v python3 >/dev/null || die "python3 is missing"
if [ ! -x "$venv/bin/schemathesis" ]; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || die "python3's venv module is missing: apt-get install python3-venv"
    log "installing python3-venv from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; then
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    fi
  fi
  log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
"$venv/bin/schemathesis" --version | grep -q "version $SCHEMATHESIS_VERSION\$" \
  || die "$venv holds another schemathesis than $SCHEMATHESIS_VERSION"
if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then log "prerequisites ready (CHATD_PREPARE_ONLY)"; exit 0; fi

live_build

# ---- services (scripts/lib/live-server.sh) ----------------------------------

live_setup "$artifacts"
live_start_fake_llm echo
live_write_config "Fake LLM (echo)"
live_start_chatd --shutdown-grace 2s --default-requests-per-minute 1000000
live_wait_ready 60
url=$live_url
admin_token=$live_admin_token
work=$live_work

# ---- hooks: existing resources, and the run's own limits ---------------------

# A schema states the form of an id, not which ids exist: a request naming a
# model config, provider, parent chat, file, MCP server or page cursor that
# does not exist is answered `400` naming the field (API.md), though its form
# is valid. The hook below (schemathesis's `before_call`) swaps such ids, and
# only ids of valid form, for existing ones (or drops them where optional),
# so that a schema-valid request stays schema-valid and reaches the checks
# behind them; an id of invalid form is left alone for the negative tests.
api() { curl -fsS -H "Authorization: Bearer $admin_token" "$url$1"; }
user_id=$(api /api/v2/users/me | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
provider_id=$(api /api/v2/chats/providers | python3 -c 'import json,sys; print(next(p["id"] for p in json.load(sys.stdin) if p["display_name"] == "Fake LLM (echo)"))')
# A second admin, whose token the hook uses to give the run's own user back
# its limits (see after_call below).
keeper_id=$(curl -fsS -H "Authorization: Bearer $admin_token" -H 'Content-Type: application/json' \
  -d '{"username": "schemathesis-keeper", "role": "admin"}' "$url/api/v2/users" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
keeper_token=$(curl -fsS -H "Authorization: Bearer $admin_token" -H 'Content-Type: application/json' \
  -d '{"name": "schemathesis"}' "$url/api/v2/users/$keeper_id/tokens" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
# The tokens the run must keep: its own user's (the bootstrap token) and the
# keeper's.
token_ids=$( (api /api/v2/users/me/tokens; echo; api "/api/v2/users/$keeper_id/tokens") \
  | python3 -c 'import json,sys; print(" ".join(t["id"] for line in sys.stdin if line.strip() for t in json.loads(line)))')
cat >"$work/hooks.py" <<'PY'
import os
import re
import sys
import uuid

import requests
import schemathesis

# Python 3.11's AST constructor fails ("recursion depth mismatch") when
# Hypothesis parses a source file deep in the recursion that generating a
# nested schema takes; a higher limit keeps it from the edge.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

USER_ID = os.environ["CHATD_ST_USER_ID"]
KEEPER_ID = os.environ["CHATD_ST_KEEPER_ID"]
PROTECTED_TOKENS = set(os.environ["CHATD_ST_TOKEN_IDS"].split())
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
PROVIDER_ID = os.environ["CHATD_ST_PROVIDER_ID"]


def is_id(value):
    return isinstance(value, str) and UUID.match(value) is not None


def file_part(part):
    return isinstance(part, dict) and set(part) == {"type", "file_id"} and part["type"] == "file" and is_id(part["file_id"])


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if isinstance(body, dict):
        # Optional wherever it appears; the run may have disabled any config.
        if is_id(body.get("model_config_id")):
            del body["model_config_id"]
        if is_id(body.get("provider_id")):
            body["provider_id"] = PROVIDER_ID
        if is_id(body.get("parent_chat_id")):
            del body["parent_chat_id"]
        ids = body.get("mcp_server_ids")
        if isinstance(ids, list) and len(ids) <= 100 and all(is_id(i) for i in ids):
            body["mcp_server_ids"] = []
        content = body.get("content")
        if isinstance(content, list):
            body["content"] = [{"type": "text", "text": "a file"} if file_part(p) else p for p in content]
    # Rules that depend on the stored state, which a document cannot state
    # (the server answers them 400): the run does not archive chats (a
    # mutation of an archived chat is refused), change an MCP server's
    # transport or clear its command or url (the transport needs one), or
    # change a provider's kind or clear its base_url (openai-compat needs
    # one). The same requests without those fields.
    method = case.method.upper()
    if isinstance(body, dict) and method == "PATCH":
        if case.path == "/api/v2/chats/{chat}" and body.get("archived") is True:
            body["archived"] = False
        if case.path == "/api/v2/chats/mcp-servers/{id}":
            for name in ("transport", "command", "url"):
                blank = isinstance(body.get(name), str) and not body[name].strip()
                if name in body and (name == "transport" or body[name] is None or (name == "command" and blank)):
                    del body[name]
        if case.path == "/api/v2/chats/providers/{id}":
            for name in ("provider", "base_url"):
                if name in body and (name == "provider" or body[name] is None):
                    del body[name]
    query = case.query
    # A long poll waits at most a second (any wait is valid; absent is 25 s).
    if isinstance(query, dict) and case.path.endswith("/updates"):
        wait = query.get("wait_ms", 60000)
        if isinstance(wait, str) and wait.isdigit():
            wait = int(wait)
        if isinstance(wait, int) and not isinstance(wait, bool) and 1000 < wait <= 60000:
            query["wait_ms"] = 1000
    if isinstance(query, dict) and case.method.upper() == "GET" and case.path in ("/api/v2/chats", "/api/v2/files"):
        if is_id(query.get("after_id")):
            del query["after_id"]
    # The message list's cursors exclude each other and `window=true`, which
    # the parameters' descriptions say and a parameter's schema cannot: keep
    # one of two valid ones.
    if isinstance(query, dict) and case.method.upper() == "GET" and case.path.endswith("/messages"):
        def positive(name):
            value = query.get(name)
            if isinstance(value, str) and value.isdigit():
                value = int(value)
            return isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if positive("before_id") and positive("after_id"):
            del query["after_id"]
        if query.get("window") in (True, "true") and (positive("before_id") or positive("after_id")):
            del query["window"]
    # Rules of the issue-34 routes that depend on the stored state or tie
    # fields together, which a document cannot state (answered 400): a
    # chat list with `shared=true` takes no `owner`; a search `after` is
    # a cursor the server gave (the run has none); a share names one
    # existing user who is not the owner (the keeper); a member's token
    # lives at most --max-member-token-lifetime (30 days); header and
    # environment names of an MCP server hold no NUL.
    if isinstance(query, dict) and case.method.upper() == "GET" and case.path == "/api/v2/chats" and query.get("shared") in (True, "true"):
        query.pop("owner", None)
    if isinstance(query, dict) and case.method.upper() == "GET" and case.path == "/api/v2/search":
        query.pop("after", None)
    if isinstance(body, dict) and method == "POST" and case.path == "/api/v2/chats/{chat}/shares":
        uid, name = body.get("user_id"), body.get("username")
        if set(body) <= {"user_id", "username"} and (uid is None or is_id(uid)) and (name is None or (isinstance(name, str) and 1 <= len(name) <= 64)):
            body.clear()
            body["user_id"] = KEEPER_ID
    if isinstance(body, dict) and method == "POST" and case.path == "/api/v2/users/{user}/tokens":
        life = body.get("lifetime_seconds")
        if isinstance(life, (int, float)) and not isinstance(life, bool) and life > 2592000:
            body["lifetime_seconds"] = 2592000
    if isinstance(body, dict) and case.path.startswith("/api/v2/chats/mcp-servers"):
        for name in ("headers", "env"):
            if isinstance(body.get(name), dict):
                body[name] = {k: v for k, v in body[name].items() if "\x00" not in k}
    # Regenerate takes an assistant answer (400 otherwise, API.md): a
    # message id the run's links hand it that names another role goes to
    # an id that does not exist instead (404), a request of the same form.
    if case.path == "/api/v2/chats/{chat}/messages/{message}/regenerate" and isinstance(case.path_parameters, dict):
        chat = case.path_parameters.get("chat")
        message = case.path_parameters.get("message")
        if is_id(chat) and str(message).isdigit():
            answer = requests.get(
                os.environ["CHATD_ST_URL"] + "/api/v2/chats/" + chat + "/messages/tree",
                headers={"Authorization": "Bearer " + os.environ["CHATD_ST_ADMIN_TOKEN"]},
                timeout=30,
            )
            if answer.ok:
                roles = {n.get("id"): n.get("role") for n in answer.json().get("nodes", [])}
                if roles.get(int(message), "assistant") != "assistant":
                    case.path_parameters["message"] = 9007199254740991
    # The run keeps its own credentials: it does not revoke its own token or
    # the keeper's, change the keeper, or try to disable itself (`400`: an
    # admin cannot), when a link hands it their ids; such a request goes to
    # an id that does not exist instead (`404`), a request of the same form.
    params = case.path_parameters
    # Nor does it delete the provider the model configs it creates point at.
    if isinstance(params, dict) and case.path == "/api/v2/chats/providers/{id}" and params.get("id") == PROVIDER_ID and case.method.upper() == "DELETE":
        params["id"] = str(uuid.uuid4())
    if isinstance(params, dict) and case.path.startswith("/api/v2/users/{user}"):
        if params.get("id") in PROTECTED_TOKENS or params.get("user") == KEEPER_ID:
            params["user"] = str(uuid.uuid4())
        elif params.get("user") in (USER_ID, "me") and case.method.upper() == "PATCH" and isinstance(body, dict) and body.get("disabled") is True:
            params["user"] = str(uuid.uuid4())


LIMITS = ["max_running_chats", "requests_per_minute", "monthly_budget_micros", "monthly_token_budget", "max_storage_bytes"]




def keeper(method, path, **kwargs):
    answer = requests.request(
        method,
        os.environ["CHATD_ST_URL"] + path,
        headers={"Authorization": "Bearer " + os.environ["CHATD_ST_KEEPER_TOKEN"]},
        timeout=30,
        **kwargs,
    )
    answer.raise_for_status()
    return answer


@schemathesis.hook
def after_call(context, case, response):
    user = USER_ID
    # The run's own user is the admin that `PATCH /users/me` (or its id)
    # changes: a request limit of 1 a minute or a budget of 0 would turn the
    # rest of the run into 429s. The keeper (another admin) gives it back the
    # server defaults.
    if case.method.upper() == "PATCH" and case.path.startswith("/api/v2/users/") and 200 <= response.status_code < 300:
        keeper("PATCH", "/api/v2/users/" + user, json={"limits": {name: None for name in LIMITS}})
PY

# ---- the run ----------------------------------------------------------------

# One run; its output is kept in $artifacts/schemathesis.out.
run_schemathesis() {
  CHATD_ST_PROVIDER_ID="$provider_id" CHATD_ST_URL="$url" CHATD_ST_USER_ID="$user_id" \
  CHATD_ST_KEEPER_TOKEN="$keeper_token" CHATD_ST_ADMIN_TOKEN="$admin_token" CHATD_ST_KEEPER_ID="$keeper_id" CHATD_ST_TOKEN_IDS="$token_ids" \
  SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$work" \
  "$venv/bin/schemathesis" run "$url/api/v2/openapi.json" \
    --url "$url" \
    --header "Authorization: Bearer $admin_token" \
    --checks all \
    --max-examples 30 \
    --seed "${SCHEMATHESIS_SEED:-20261206}" \
    --workers 2 \
    --max-response-time 70 \
    --request-timeout 80 \
    --exclude-path-regex '^/api/experimental/|/stream$|/events$|/stream/parts$|^/api/v2/chats/import$' \
    --report junit --report-dir "$artifacts" \
    "$@" 2>&1 | tee "$artifacts/schemathesis.out"
  return "${PIPESTATUS[0]}"
}

log "schemathesis run (all checks, 30 examples per operation)"
set +e
# schemathesis keeps a cache in its working directory: the artifacts one.
cd "$artifacts"
run_schemathesis "$@"
status=$?
# A crash of schemathesis's own case generation ("Runtime Error" under
# Errors, e.g. Hypothesis's "Inconsistent results" in the coverage phase,
# seen once in a few runs with 2 workers) says nothing about the server:
# such a run, and only such a run (no check failed: no "Failures:" in the
# summary), is run once more, and the second run's status counts.
if [ "$status" -ne 0 ] && grep -q 'Runtime Error' schemathesis.out \
  && ! grep -q '^Failures:' schemathesis.out; then
  log "schemathesis itself failed (a Runtime Error, no check failed); running once more"
  cp schemathesis.out schemathesis.first.out
  run_schemathesis "$@"
  status=$?
fi
set -e
if [ "$status" -ne 0 ]; then
  echo "schemathesis: failures (status $status); output and chatd.log in $artifacts" >&2
fi
exit "$status"
