#!/usr/bin/env bash
# Ensures a PostgreSQL server accepts `postgres` without a password at
# 127.0.0.1:5432. On a machine without PostgreSQL it installs Debian's
# packages (needs root), configures trust auth on loopback, and starts the
# cluster. Idempotent: on a machine where the server already runs it only
# checks the connection.
set -euo pipefail

ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
can_login() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; }

if command -v pg_isready >/dev/null && ready && can_login; then
  exit 0
fi

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "== installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql postgresql-client >/dev/null
fi

version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$version" ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -1)
  pg_createcluster "$version" main >/dev/null
fi
conf=/etc/postgresql/$version/main
# Trust auth on loopback for the tests (this is a test machine's cluster).
if ! grep -q '^# chatd-test-trust' "$conf/pg_hba.conf"; then
  {
    echo '# chatd-test-trust'
    echo 'host all all 127.0.0.1/32 trust'
    echo 'host all all ::1/128 trust'
    echo 'local all all trust'
  } | cat - "$conf/pg_hba.conf" > "$conf/pg_hba.conf.new"
  mv "$conf/pg_hba.conf.new" "$conf/pg_hba.conf"
  chown postgres:postgres "$conf/pg_hba.conf"
fi
grep -q "^listen_addresses" "$conf/postgresql.conf" || echo "listen_addresses = '127.0.0.1'" >> "$conf/postgresql.conf"
grep -q "^max_connections = 300" "$conf/postgresql.conf" || echo "max_connections = 300" >> "$conf/postgresql.conf"

echo "== starting PostgreSQL $version"
pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
  || pg_ctlcluster --skip-systemctl-redirect "$version" main restart
for _ in $(seq 1 60); do
  if ready && can_login; then exit 0; fi
  sleep 0.5
done
echo "PostgreSQL did not become ready at 127.0.0.1:5432" >&2
exit 1
