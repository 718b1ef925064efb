#!/usr/bin/env bash
# Regenerates (or, with --check, verifies) the offline data of sqlx's
# compile-checked queries: `.sqlx/query-<hash>.json` at the workspace root,
# one file per `sqlx::query!` / `query_as!` / `query_scalar!` statement
# (issue 32 point 2). Ordinary builds read these files and need no database:
# `.cargo/config.toml` sets `SQLX_OFFLINE=true` for every cargo command
# (Cargo's `[env]` does not override a variable already set, so this script's
# own `SQLX_OFFLINE=false` wins).
#
#   scripts/sqlx-prepare.sh           # rewrite .sqlx/ from the sources
#   scripts/sqlx-prepare.sh --check   # exit 1 naming missing/stale/changed files
#
# What it does, without sqlx-cli: creates a fresh database on
# CHATD_TEST_DATABASE_URL's server (default
# postgres://postgres@127.0.0.1:5432/postgres), applies
# crates/chatd-store/migrations/*.sql in order with psql (each in one
# transaction, as sqlx's migrator does) and creates `_sqlx_migrations` with
# sqlx's own definition (queries::migrations reads it); then, in a target
# directory of its own (target/sqlx-prepare, or $SQLX_PREPARE_TARGET_DIR),
# `cargo clean -p` of every
# package in PACKAGES (so their macros run again) and `cargo check --lib
# --profile test` (the library with its unit tests: where the statements
# are) with DATABASE_URL=<that database>, SQLX_OFFLINE=false and
# SQLX_OFFLINE_DIR=<empty temporary directory>: each macro describes its
# statement against the database and writes its json there. Without
# --check, the new files are copied into .sqlx/ first and only then the
# files no statement uses any more are removed (a concurrent offline build
# never misses a file). The database is dropped on exit, whatever happens.
# A failed build leaves .sqlx/ untouched.
#
# Recipe for converting a statement (see docs/testing.md "Compile-checked
# SQL"):
# - The SQL must be string literals, optionally joined with `+`
#   ("SELECT a " + "FROM t"); `concat!` or any macro call is refused. A
#   shared column list is a `macro_rules!` that expands to the whole sqlx
#   macro with the list written as literals and the caller's rest passed as
#   `$rest:tt` (not `literal`: no invisible group may wrap it), e.g.
#   `sqlx::query_as!(UserRow, "SELECT id, username ... FROM users " + $rest, $($arg),*)`.
# - `query_as!` ignores `FromRow` and `#[sqlx(try_from = ...)]`: fetch into a
#   plain row (or `query!`'s anonymous record) and convert after, or name
#   the Rust type in the column alias (`role AS "role: Role"`, needs
#   sqlx::Type). Fix PostgreSQL's nullability guesses with `AS "col!"` (not
#   null) and `AS "col?"` (nullable): LEFT JOINs, expressions, COALESCE,
#   count(*), RETURNING of computed values.
# - Parameters are type-checked too: pass the Rust type PostgreSQL infers
#   (`$1::text` in the SQL when inference is ambiguous).
# - Statements assembled at run time (QueryBuilder, optional clauses) stay
#   `sqlx::query(...)` with a one-line comment saying why.
# - After changing any statement: run this script, then commit the code and
#   the new .sqlx/*.json files together (`git add .sqlx/query-<hash>.json`
#   for the new ones), so no committed state fails an offline build.
#   Removing stale files is safe once no commit refers to them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The crates whose sources use sqlx's query macros.
PACKAGES=(chatd-store)

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

log() { echo "== sqlx-prepare: $*" >&2; }

server_url=${CHATD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db="chatd_sqlx_prepare_$$_$(date +%s)"
# The same server, database `$db` (the URL's path is the database name).
base=${server_url%%\?*}
query=${server_url#"$base"}
db_url="${base%/*}/$db$query"

out=$(mktemp -d)
cleanup() {
  psql "$server_url" -Xq -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT

log "database $db"
psql "$server_url" -Xq -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$db\"" >/dev/null
psql "$db_url" -Xq -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
-- sqlx-postgres 0.9's definition (migrate.rs, ensure_migrations_table).
CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
    success BOOLEAN NOT NULL,
    checksum BYTEA NOT NULL,
    execution_time BIGINT NOT NULL
);
SQL
for file in $(ls crates/chatd-store/migrations/*.sql | sort); do
  psql "$db_url" -Xq -v ON_ERROR_STOP=1 --single-transaction -f "$file" >/dev/null
done

target=${SQLX_PREPARE_TARGET_DIR:-$root/target/sqlx-prepare}
pkg_args=()
for p in "${PACKAGES[@]}"; do pkg_args+=(-p "$p"); done
log "cargo check ${pkg_args[*]} --lib --profile test (target dir $target)"
cargo clean -q "${pkg_args[@]}" --target-dir "$target" 2>/dev/null || true
build_log="$out/cargo.log"
if ! DATABASE_URL=$db_url SQLX_OFFLINE=false SQLX_OFFLINE_DIR=$out \
  cargo check "${pkg_args[@]}" --lib --profile test --target-dir "$target" 2>"$build_log"; then
  grep -v '^warning' "$build_log" | grep -A12 '^error' >&2 || cat "$build_log" >&2
  log "the build failed: .sqlx/ left as it was"
  exit 1
fi
rm -f "$build_log"
count=$(find "$out" -name 'query-*.json' | wc -l)
log "$count statements described"

mkdir -p .sqlx
if $check; then
  status=0
  for f in "$out"/query-*.json; do
    [ -e "$f" ] || continue
    name=${f##*/}
    if [ ! -e ".sqlx/$name" ]; then
      echo "missing: .sqlx/$name" >&2; status=1
    elif ! cmp -s "$f" ".sqlx/$name"; then
      echo "changed: .sqlx/$name" >&2; status=1
    fi
  done
  for f in .sqlx/query-*.json; do
    [ -e "$f" ] || continue
    [ -e "$out/${f##*/}" ] || { echo "stale: $f" >&2; status=1; }
  done
  if [ "$status" = 0 ]; then
    log "ok: .sqlx/ matches the sources"
  else
    log ".sqlx/ is out of date: run scripts/sqlx-prepare.sh and commit .sqlx/"
  fi
  exit "$status"
fi

# Add and update first, then remove what no statement uses.
for f in "$out"/query-*.json; do
  [ -e "$f" ] || continue
  cmp -s "$f" ".sqlx/${f##*/}" 2>/dev/null || cp "$f" .sqlx/
done
for f in .sqlx/query-*.json; do
  [ -e "$f" ] || continue
  [ -e "$out/${f##*/}" ] || { rm -f "$f"; log "removed stale $f"; }
done
log "wrote .sqlx/ ($count files)"
