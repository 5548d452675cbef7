#!/usr/bin/env bash
# Plays the conformance suite against a live `cra serve` on loopback, the way CI does.
#
#   conformance/tools/live.sh [path/to/cra] [extra `cra conformance run` options...]
#
# Starts the server on a free port with a fresh data directory, a settable clock and an API-keys
# file holding one key per actor the fixtures use (admin, agent-conf, conformance-test-agent,
# jordan, riley), runs
# `cra conformance run --target`, stops the server it started (by its pid) and exits with the
# runner's status (0 all passed, 2 failures, 1 could not run).
set -euo pipefail
cra=${1:-target/debug/cra}
shift || true
work=$(mktemp -d)
trap 'if [[ -n "${pid:-}" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
key() { printf 'cra_%s_%s' "$1" "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
admin=$(key admin); agent=$(key agent); golden=$(key golden); jordan=$(key jordan); riley=$(key riley)
cat > "$work/keys.toml" <<KEYS
[[keys]]
token = "$admin"
actor_id = "admin"
actor_type = "human"
roles = ["admin"]
[[keys]]
token = "$agent"
actor_id = "agent-conf"
actor_type = "agent"
roles = ["agent"]
[[keys]]
token = "$golden"
actor_id = "conformance-test-agent"
actor_type = "agent"
roles = ["agent"]
[[keys]]
token = "$jordan"
actor_id = "jordan"
actor_type = "human"
roles = ["author"]
[[keys]]
token = "$riley"
actor_id = "riley"
actor_type = "human"
roles = ["author"]
KEYS
chmod 600 "$work/keys.toml"
# `--test-clock` lets the runner play each case at its `setup.now` (POST /v1/conformance/clock);
# per-key rate limiting is off because the runner sends a few thousand requests in seconds while
# it moves the clock back and forth (no fixture exercises the per-key limiter).
cat > "$work/cra.toml" <<CONF
api_keys = "$work/keys.toml"
[limits]
requests_per_second = 0
CONF
"$cra" serve --test-clock --config "$work/cra.toml" --addr 127.0.0.1:0 --data "$work/data" > "$work/serve.log" 2>&1 &
pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/serve.log" | head -1 || true)
  [[ -n "$url" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$url" ]] || { echo "cra serve did not report its address" >&2; cat "$work/serve.log" >&2; exit 1; }
set +e
"$cra" conformance run --target "$url" --token "$admin" \
  --actor-token "agent-conf=$agent" --actor-token "conformance-test-agent=$golden" \
  --actor-token "jordan=$jordan" --actor-token "riley=$riley" "$@"
status=$?
set -e
exit "$status"
