#!/usr/bin/env bash
# The workspace sandbox (README "Workspaces") needs bubblewrap (`bwrap`):
# installs it from Debian's packages when it is missing (as root, or with
# sudo). Never fails: without it, the tests that run `shell` say so and
# skip, and a replica answers `shell` with an error result.
# Used by scripts/test.sh and scripts/e2e.sh.
set -uo pipefail
command -v bwrap >/dev/null 2>&1 && exit 0
echo "== installing bubblewrap"
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get install -y bubblewrap >/dev/null 2>&1 \
  || { $sudo apt-get update >/dev/null 2>&1 && $sudo apt-get install -y bubblewrap >/dev/null 2>&1; } \
  || echo "== bubblewrap could not be installed: the sandbox tests skip"
exit 0
