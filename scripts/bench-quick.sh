#!/usr/bin/env bash
# The quick benchmarks of the test command (issue 15; README "Benchmarks").
#
# Runs after every test, alone (never beside the parallel test run), on the
# debug build the tests made: bench_transitions (ChatMachine against a raw-SQL
# baseline) and bench_worker --quick (turns against a raw-SQL turn ceiling
# for 1, 10 and 100 chats, and 200 streaming chats against the fake model's
# own time). Each compares ratios measured in the same run, never absolute
# times, and fails when one falls below its floor. The floors are at most
# half of what the same quick run measured on the development machine
# (README lists those figures), so noise cannot fail CI; a real regression
# of that size does.
#
# CHATD_BENCH_FLOORS=off skips the floors (figures only).
set -euo pipefail
cd "$(dirname "$0")/.."

export CHATD_TEST_DATABASE_URL="${CHATD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

transitions_floor="--min-ratio 0.25"
worker_floors="--min-ratio 1=0.15,10=0.15,100=0.3,stream=0.45"
if [ "${CHATD_BENCH_FLOORS:-}" = "off" ]; then
  transitions_floor=""
  worker_floors=""
fi

# The workspace's feature set, as the tests built it: nothing rebuilds.
cargo build --workspace --examples
status=0
echo "== bench_transitions (quick)"
# shellcheck disable=SC2086
target/debug/examples/bench_transitions --chats 60 --clients 8 --rounds 3 --repeat 3 $transitions_floor || status=1
echo "== bench_worker --quick"
# shellcheck disable=SC2086
target/debug/examples/bench_worker --quick $worker_floors || status=1
exit "$status"
