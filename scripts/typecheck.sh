#!/usr/bin/env bash
# The type check of the web UI (issue 32): TypeScript's compiler, pinned in
# tools/typecheck/package.json (exact version, integrity in its
# package-lock.json), runs as `tsc --noEmit --allowJs --checkJs` over the
# ES modules of web/ listed in web/tsconfig.json. No build step and no
# bundler: the browser runs the same files; the types are JSDoc comments
# (`// @ts-check` at the top of every module, the wire shapes of
# ../shared/API.md in web/wire.js, the used parts of the vendored libraries
# in web/types/vendor/). Exit status: tsc's (0 = no error).
#
# Installs Node.js and npm from Debian's packages when node is missing
# (needs root), and runs `npm ci` in tools/typecheck when its node_modules is
# missing or older than package-lock.json (node_modules is ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "== typecheck: $*"; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "typecheck: node and npm are missing: install them (apt-get install -y nodejs npm)" >&2; exit 2; }
  log "installing Node.js and npm from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show nodejs >/dev/null 2>&1; then apt-get update -qq; fi
  if ! apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
fi

dir=tools/typecheck
stamp=$dir/node_modules/.chatd-package-lock.sha256
lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
if [ ! -x "$dir/node_modules/.bin/tsc" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$stamp"
fi

# Every module of web/ is checked: listed in web/tsconfig.json and marked
# `// @ts-check` on its first line.
listed=$("$dir/node_modules/.bin/tsc" --showConfig -p web/tsconfig.json | node -e '
  let text = ""; process.stdin.on("data", (d) => (text += d)).on("end", () => {
    for (const f of JSON.parse(text).files) console.log(f.replace(/^\.\//, ""));
  });' | sort)
missing=$(comm -23 <(cd web && ls -1 ./*.js | sed 's|^\./||' | sort) <(echo "$listed"))
[ -z "$missing" ] || { echo "typecheck: web/tsconfig.json does not list: $missing" >&2; exit 1; }
for f in web/*.js; do
  [ "$(head -n1 "$f")" = "// @ts-check" ] || { echo "typecheck: $f does not start with // @ts-check" >&2; exit 1; }
done

log "tsc $("$dir/node_modules/.bin/tsc" --version | sed 's/^Version //') --noEmit --allowJs --checkJs -p web/tsconfig.json"
"$dir/node_modules/.bin/tsc" --noEmit --allowJs --checkJs -p web/tsconfig.json
log "0 errors"
