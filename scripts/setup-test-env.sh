#!/usr/bin/env bash
# Prepares a fresh machine for `npm test`: npm dependencies, a redis-server answering on
# 127.0.0.1:6379, redis-cli (the Redis Cluster tests start their own cluster of six redis-server
# children and join them with `redis-cli --cluster create`: test/helpers/redis-cluster.ts),
# docker-compose (test/deploy/compose.test.ts runs `docker-compose config`, which needs no daemon),
# promtool from Debian's prometheus package (test/ops/rules.test.ts runs `promtool check rules` and
# `promtool test rules`; a 19 MB download, about 10 s; only the promtool binary is kept), Debian's
# postgresql answering on 127.0.0.1:5432 and Debian's chromium for the browser test. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-cli >/dev/null 2>&1 || apt_install redis-tools
# Docker's own compose plugin serves as well when the docker CLI has it.
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose
if ! command -v promtool >/dev/null 2>&1; then
  # promtool alone, unpacked from Debian's prometheus package rather than installed: installing it
  # would set up a Prometheus service on port 9090, the edge's default admin port.
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  promtool_tmp=$(mktemp -d)
  (cd "$promtool_tmp" && apt-get download -qq prometheus 2>/dev/null && dpkg-deb -x prometheus_*.deb root)
  install -m 0755 "$promtool_tmp/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$promtool_tmp"
fi

redis_answers() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && timeout 2 head -c 5 <&3 | grep -q PONG) 2>/dev/null; }
if ! redis_answers; then
  mkdir -p /tmp/queen-edge-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /tmp/queen-edge-redis --logfile /tmp/queen-edge-redis/redis.log
  for _ in $(seq 1 50); do redis_answers && break; sleep 0.1; done
  redis_answers || { echo "redis-server did not start" >&2; exit 1; }
fi

# PostgreSQL for the durable store's tests (test/helpers/pg.ts): Debian's server answering on
# 127.0.0.1:5432 with trust authentication for local connections, as a throwaway test machine may.
pg_answers() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
if ! pg_answers; then
  command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
  pg_version=$(ls /etc/postgresql | sort -n | tail -1)
  pg_hba=/etc/postgresql/$pg_version/main/pg_hba.conf
  grep -q '^host all all 127.0.0.1/32 trust' "$pg_hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$pg_hba"
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start || pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload
  for _ in $(seq 1 100); do pg_answers && break; sleep 0.1; done
  pg_answers || { echo "postgresql did not start" >&2; exit 1; }
fi

if [ -f test/browser/browser.test.ts ] && [ ! -x /usr/bin/chromium ]; then apt_install chromium; fi
