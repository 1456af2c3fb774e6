#!/usr/bin/env python3
"""One user's HealthKit history, month by month: minute heart rate (43,200 samples a 30-day month) sent as
one health.ingest per month, the way seed 001's initial sync walks back through the years. Prints each
month's time, the first and last months side by side, and resident bytes per stored sample; with random
version 4 UUIDs (as HealthKit makes them) and with ordered ones in the same run.

  python3 Benchmarks/history.py --months 24 [--binary .build/release/healthkernel] [--baseline OTHER]

This is the start of the history benchmark of issue "HealthKit history at real scale"; it builds nothing
itself: build the release binary first (Benchmarks/bench.py does, or
`swift build -c release --static-swift-stdlib`).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time, uuid

SECRET = "benchmark-secret-benchmark-secret-0123456789"
USER = "aaaaaaaa-0000-4000-8000-000000000001"


def token():
    sys.path.insert(0, os.path.dirname(__file__))
    import bench
    return bench.token({"sub": USER, "aud": "authenticated", "role": "authenticated", "iat": int(time.time()),
                        "exp": int(time.time()) + 86400})


def month_line(tok, m, ordered):
    t0 = 1_500_000_000 + m * 30 * 86400  # 2017-07 onwards
    samples = []
    for i in range(43200):
        u = "%08x-%04x-4000-8000-%012x" % (m, i >> 16, i) if ordered else str(uuid.uuid4())
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + i * 60))
        samples.append({"uuid": u, "type": "HKQuantityTypeIdentifierHeartRate", "value": 60 + i % 40,
                        "unit": "count/min", "start": at, "end": at})
    return (json.dumps({"jsonrpc": "2.0", "id": m, "method": "health.ingest",
                        "params": {"auth": tok, "timezone": "UTC", "samples": samples}}, separators=(",", ":")) + "\n").encode()


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def history(binary, months, ordered, tok):
    with tempfile.TemporaryDirectory() as tmp:
        k = subprocess.Popen([binary, "serve", "--data-dir", os.path.join(tmp, "d"), "--jwt-secret", SECRET, "--fsync", "never",
                              "--log-level", "error", "--snapshot-every-records", "1000000000", "--snapshot-every-seconds", "0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        k.stdin.write(b'{"jsonrpc":"2.0","id":"w","method":"kernel.info"}\n')
        k.stdin.flush()
        k.stdout.readline()
        start_rss = rss(k.pid)
        times = []
        for m in range(months):
            line = month_line(tok, m, ordered)
            t = time.monotonic()
            k.stdin.write(line)
            k.stdin.flush()
            answer = json.loads(k.stdout.readline())
            times.append(time.monotonic() - t)
            if "error" in answer:
                raise SystemExit("month %d: %s" % (m, answer["error"]))
        per_sample = (rss(k.pid) - start_rss) / (months * 43200)
        k.stdin.close()
        k.wait()
        return times, per_sample


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--months", type=int, default=12)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", ".build", "release", "healthkernel"))
    p.add_argument("--baseline")
    a = p.parse_args()
    tok = token()
    builds = [("this build", a.binary)] + ([("baseline", a.baseline)] if a.baseline else [])
    print("One user, %d months of minute heart rate (43,200 samples each), one health.ingest per month, --fsync never" % a.months)
    for name, binary in builds:
        for ordered in (False, True):
            times, per_sample = history(binary, a.months, ordered, tok)
            k = min(6, max(1, a.months // 2))
            first, last = statistics.median(times[:k]), statistics.median(times[-k:])
            print("  %-10s %-13s months: %s" % (name, "ordered UUIDs" if ordered else "random UUIDs",
                                                  " ".join("%.2f" % t for t in times)))
            print("  %-10s %-13s first %d: %.2f s, last %d: %.2f s (%.2fx), %.0f resident bytes per sample" % (
                name, "", k, first, k, last, last / first, per_sample))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
