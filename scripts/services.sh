#!/usr/bin/env bash
# scripts/services.sh: make sure PostgreSQL (127.0.0.1:5432, trust, database
# `test`) and Redis (127.0.0.1:6379) answer, and that Chromium is installed. Where they run, it only checks;
# where they are stopped, it starts them; where they are missing, it installs
# them from Debian and configures them (docs/DESIGN.md D25). Needs root for the last
# two.
set -euo pipefail

log() { printf '==> %s\n' "$*" >&2; }

pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_ready() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

apt_updated=
apt_install() {
	if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Headless Chromium for the dashboard's browser test (cmd/llm4agents
# TestDashboardInBrowser), like the servers: installed from Debian when
# missing.
if ! command -v chromium >/dev/null 2>&1; then
	log "installing Chromium (the dashboard's browser tests)"
	apt_install chromium
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
	log "installing PostgreSQL"
	apt_install postgresql
fi
pg_version() { ls /etc/postgresql | sort -V | tail -1; }
# A freshly installed server uses scram on 127.0.0.1; the tests use trust.
pg_trust() {
	local hba=/etc/postgresql/$(pg_version)/main/pg_hba.conf
	if ! grep -q '^# llm4agents trust' "$hba"; then
		log "setting trust auth for local connections in $hba"
		{ echo '# llm4agents trust'; echo 'local all all trust'; echo 'host all all 127.0.0.1/32 trust'; echo 'host all all ::1/128 trust'; cat "$hba"; } > "$hba.new"
		mv "$hba.new" "$hba"
	fi
}
if ! pg_ready; then
	log "starting PostgreSQL"
	pg_trust
	pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start
	for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
fi
pg_ready || { echo "PostgreSQL does not answer on 127.0.0.1:5432" >&2; exit 1; }
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
	pg_trust
	pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main reload
	sleep 1
fi
if ! psql -h 127.0.0.1 -U postgres -Atc "select 1 from pg_database where datname='test'" 2>/dev/null | grep -q 1; then
	log "creating database test"
	psql -h 127.0.0.1 -U postgres -c 'create database test' >/dev/null
fi

if ! command -v redis-server >/dev/null 2>&1; then
	log "installing Redis"
	apt_install redis-server
fi
if ! redis_ready; then
	log "starting Redis"
	mkdir -p /var/lib/redis /var/log/redis
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	for _ in $(seq 1 30); do redis_ready && break; sleep 1; done
fi
redis_ready || { echo "Redis does not answer on 127.0.0.1:6379" >&2; exit 1; }
log "PostgreSQL and Redis are up"
