#!/usr/bin/env bash
# Makes the data-dir fixture datadir-0.1.0/ with a healthkernel 0.1.0 binary (the release before the
# storage interface): data in every domain, a snapshot, records after it, and a kill -9 so the log's
# tail is only in the log. Usage: make-datadir-0.1.0.sh path/to/healthkernel-0.1.0
set -euo pipefail
BIN=$1
OUT=$(cd "$(dirname "$0")" && pwd)/datadir-0.1.0
SECRET=healthkernel-test-secret-0123456789abcdef
rm -rf "$OUT"; mkdir -p "$OUT"
SERVICE=$("$BIN" token --role service_role --jwt-secret "$SECRET" --data-dir "$OUT")
EXTERNAL=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJodHRwczovL2V4YW1wbGUuc3VwYWJhc2UuY28vYXV0aC92MSIsInN1YiI6ImFhYWFhYWFhLWFhYWEtNGFhYS04YWFhLWFhYWFhYWFhYWFhYSIsImF1ZCI6ImF1dGhlbnRpY2F0ZWQiLCJyb2xlIjoiYXV0aGVudGljYXRlZCIsImlhdCI6MTc2Mzc2OTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.8ZA__W41avEdg3xBvAMUQx8I0VhsjhcPi2Fdts5TDTk
req() { jq -nc --arg m "$1" --argjson p "$2" --arg t "$3" '{jsonrpc:"2.0", id:1, method:$m, params:($p + (if $t == "" then {} else {auth:$t} end))}'; }
coproc K { exec "$BIN" serve --data-dir "$OUT" --jwt-secret "$SECRET" --log-level error --snapshot-every-records 1000000 --snapshot-every-seconds 0; }
call() { req "$@" >&"${K[1]}"; read -r line <&"${K[0]}"; echo "$line"; }
call auth.signUp '{"email":"fixture@example.com","password":"fixture password 1"}' "" > /dev/null
for T in "$EXTERNAL"; do
  call screentime.updateConnection '{"enabled":true,"timezone":"Europe/Berlin","selection":{"apps":["a","b"]}}' "$T"
  call screentime.claim '{"date":"2025-03-01","minutes":60}' "$T"
  call screentime.upload '{"date":"2025-03-01","verifiedMinutes":80,"raw":{"apps":[{"id":"x","min":80}],"v":2.5}}' "$T"
  call screentime.claim '{"date":"2025-03-02","minutes":30}' "$T"
  call screentime.logEvent '{"type":"intervalDidStart","activity":"daily","at":"2025-03-01T08:00:00Z"}' "$T"
  call rewards.earn '{"xp":100,"reason":"streak","key":"k1"}' "$T"
  call rewards.redeem '{"xp":50}' "$T"
  call sessions.record '{"startTime":"2025-03-01T07:00:00Z","durationSeconds":600,"clientSessionId":"c1"}' "$T"
  call kernel.snapshot '{}' "$SERVICE"
  call screentime.upload '{"date":"2025-03-02","verifiedMinutes":31}' "$T"
  call rewards.earn '{"xp":7,"reason":"after snapshot","key":"k2"}' "$T"
  call sessions.record '{"startTime":"2025-03-02T07:00:00Z","durationSeconds":300}' "$T"
  call sessions.start '{"clientSessionId":"timer-1"}' "$T"
done > /dev/null
kill -9 "$K_PID"; wait "$K_PID" 2>/dev/null || true
rm -f "$OUT/LOCK"
ls -la "$OUT" >&2
