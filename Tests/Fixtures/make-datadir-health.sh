#!/usr/bin/env bash
# Makes the data-dir fixture datadir-health/ with the healthkernel binary given (the release before rows
# were held compactly, d11cca1): HealthKit data with random UUIDs in a zone east of UTC, long source
# names, samples across midnight, workouts, a night's sleep, a snapshot, then a replaceDays ingest and a
# delete after it, and a kill -9 so those are only in the log. It also records that binary's answers in
# datadir-health.answers.json, which FixtureTests expects every later build to give again.
# Usage: make-datadir-health.sh path/to/healthkernel
set -euo pipefail
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/datadir-health
SECRET=healthkernel-test-secret-0123456789abcdef
rm -rf "$OUT"; mkdir -p "$OUT"
SERVICE=$("$BIN" token --role service_role --jwt-secret "$SECRET" --data-dir "$OUT")
USER=$("$BIN" token --user bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb --ttl 600 --jwt-secret "$SECRET" --data-dir "$OUT")
req() { jq -nc --arg m "$1" --argjson p "$2" --arg t "$3" '{jsonrpc:"2.0", id:1, method:$m, params:($p + (if $t == "" then {} else {auth:$t} end))}'; }
coproc K { exec "$BIN" serve --data-dir "$OUT" --jwt-secret "$SECRET" --log-level error --snapshot-every-records 1000000 --snapshot-every-seconds 0; }
# Answers land in $LINE: the coprocess's pipes are not open in a subshell, so no $(call ...).
call() { req "$@" >&"${K[1]}"; read -r LINE <&"${K[0]}"; }
ok() { call "$@"; echo "$LINE" | jq -e .result > /dev/null; }
uuid() { python3 -c 'import uuid; print(str(uuid.uuid4()).upper())'; }

# Day 1 and 2 (2025-03-01/02, Europe/Berlin): heart rate every 30 minutes, steps every hour (one
# across midnight), two workouts, one night of sleep; from a watch with long source names.
FIRST=$(python3 - <<'EOF'
import json, uuid
u = lambda: str(uuid.uuid4()).upper()
src = {"source": {"name": "Jane Appleseed's Apple Watch", "bundleId": "com.apple.health.81C6CE5A-0D53-4E1A-8B9E-1C2D3E4F5A6B"},
       "device": {"name": "Apple Watch", "model": "Watch6,18"}}
def at(day, minute): return "2025-03-%02dT%02d:%02d:00Z" % (day, minute // 60, minute % 60)
samples = []
for day in (1, 2):
    for m in range(0, 1440, 30):
        samples.append(dict(uuid=u(), type="HKQuantityTypeIdentifierHeartRate", value=55 + (m // 30) % 40, unit="count/min",
                            start=at(day, m), end=at(day, m), **src))
    for h in range(24):
        samples.append(dict(uuid=u(), type="HKQuantityTypeIdentifierStepCount", value=100 + h, unit="count",
                            start=at(day, h * 60), end=at(day, h * 60 + 30), **src))
samples.append(dict(uuid=u(), type="HKQuantityTypeIdentifierStepCount", value=600, unit="count",
                    start="2025-03-01T22:30:00Z", end="2025-03-01T23:30:00Z", **src))
workouts = [dict(uuid=u(), activityType="running", start="2025-03-01T07:00:00Z", end="2025-03-01T07:40:00Z",
                 durationSeconds=2400, energyKcal=410.5, distanceMeters=7200, **src),
            dict(uuid=u(), activityType="yoga", start="2025-03-02T18:00:00Z", end="2025-03-02T18:30:00Z",
                 durationSeconds=1800, **src)]
sleep = [dict(uuid=u(), stage=s, start=a, end=b, **src) for s, a, b in [
    ("inBed", "2025-03-01T21:30:00Z", "2025-03-02T05:30:00Z"), ("asleepCore", "2025-03-01T22:00:00Z", "2025-03-02T01:00:00Z"),
    ("asleepDeep", "2025-03-02T01:00:00Z", "2025-03-02T02:30:00Z"), ("asleepREM", "2025-03-02T02:30:00Z", "2025-03-02T05:00:00Z")]]
print(json.dumps({"deviceId": "watch-1", "timezone": "Europe/Berlin", "samples": samples, "workouts": workouts, "sleep": sleep}))
EOF
)
ok health.ingest "$FIRST" "$USER"
ok kernel.snapshot '{}' "$SERVICE"
# After the snapshot: day 2 sent again by the watch with fewer heart-rate samples (replaceDays), a
# workout from the phone, and three of day 1's heart-rate samples deleted.
SECOND=$(echo "$FIRST" | jq -c '{deviceId, timezone: "Europe/Berlin", replaceDays: ["2025-03-02"],
  samples: [.samples[] | select(.start | startswith("2025-03-02")) | select(.type | endswith("HeartRate")) | select(.start[14:16] == "00")],
  workouts: [.workouts[] | select(.start | startswith("2025-03-02"))], sleep: .sleep}')
ok health.ingest "$SECOND" "$USER"
ok health.ingest "$(jq -nc --arg u "$(uuid)" '{deviceId: "phone", timezone: "Europe/Berlin", workouts: [{uuid: $u, activityType: "walking",
  start: "2025-03-01T12:00:00Z", end: "2025-03-01T12:45:00Z", durationSeconds: 2700, distanceMeters: 3500}]}')" "$USER"
ok health.delete "$(echo "$FIRST" | jq -c '{uuids: [.samples[0:3][] | .uuid]}')" "$USER"

# The answers every later build must give again (cursors aside: they are opaque).
call health.summary '{"from":"2025-02-28","to":"2025-03-03"}' "$USER"; SUMMARY=$LINE
call health.weekly '{"from":"2025-02-24","to":"2025-03-09"}' "$USER"; WEEKLY=$LINE
call health.workouts '{"from":"2025-03-01","to":"2025-03-02","limit":2}' "$USER"; WORKOUTS=$LINE
call sync.changes '{"limit":1000,"entities":["health.workout","health.sleep","health.day"]}' "$USER"; CHANGES=$LINE
call sync.changes '{"limit":1000,"entities":["health.sample"]}' "$USER"; SAMPLES=$LINE
jq -n --argjson summary "$SUMMARY" --argjson weekly "$WEEKLY" --argjson workouts "$WORKOUTS" --argjson changes "$CHANGES" \
  --argjson sampleChanges "$SAMPLES" '{$summary, $weekly, $workouts, $changes, $sampleChanges}
  | del(.workouts.result.nextCursor, .changes.result.cursor, .sampleChanges.result.cursor)' > "$HERE/datadir-health.answers.json"
kill -9 "$K_PID"; wait "$K_PID" 2>/dev/null || true
rm -f "$OUT/LOCK"
ls -la "$OUT" >&2
