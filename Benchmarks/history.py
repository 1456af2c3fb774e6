#!/usr/bin/env python3
"""One user's HealthKit history, month by month: minute heart rate (43,200 samples a 30-day month) sent as
one health.ingest per month, the way seed 001's initial sync walks back through the years, with random
version 4 UUIDs (as HealthKit makes them) and with ordered ones in the same run. Meanwhile another host
uploads Screen Time days for another user on a second socket connection, one request at a time.

After the sync it measures a feed page (sync.changes, limit 100, first page and one deep in the feed),
health.delete of 1,000 UUIDs, resident memory, and a restart from the snapshot after kill -9, and prints
every figure beside its target from issue "HealthKit history at real scale".

  python3 Benchmarks/history.py --years 10 [--binary .build/release/healthkernel] [--baseline OTHER]
  python3 Benchmarks/history.py --months 24        # a shorter run

It builds nothing itself: build the release binary first (`swift build -c release --static-swift-stdlib`,
or let Benchmarks/bench.py do it).
"""
import argparse, json, os, signal, socket, statistics, subprocess, sys, tempfile, threading, time, uuid

SECRET = "benchmark-secret-benchmark-secret-0123456789"
USER = "aaaaaaaa-0000-4000-8000-000000000001"
OTHER = "aaaaaaaa-0000-4000-8000-000000000002"
SAMPLES = 43200


def token(sub):
    sys.path.insert(0, os.path.dirname(__file__))
    import bench
    return bench.token({"sub": sub, "aud": "authenticated", "role": "authenticated", "iat": int(time.time()),
                        "exp": int(time.time()) + 86400})


def line(i, method, params):
    return (json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}, separators=(",", ":")) + "\n").encode()


def month_line(tok, m, ordered, months):
    """Month m's ingest line and its UUIDs: the months run up to about a month ago."""
    t0 = (int(time.time()) // 86400 - (months + 1) * 30) * 86400 + m * 30 * 86400
    uuids, samples = [], []
    for i in range(SAMPLES):
        u = ("%08x-%04x-4000-8000-%012x" % (m, i >> 16, i) if ordered else str(uuid.uuid4())).upper()
        uuids.append(u)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + i * 60))
        samples.append({"uuid": u, "type": "HKQuantityTypeIdentifierHeartRate", "value": 60 + i % 40,
                        "unit": "count/min", "start": at, "end": at})
    return line(m, "health.ingest", {"auth": tok, "timezone": "UTC", "samples": samples}), uuids


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) * 1024
    return 0


class Kernel:
    def __init__(self, binary, data, sock):
        self.p = subprocess.Popen([binary, "serve", "--data-dir", data, "--jwt-secret", SECRET, "--fsync", "never",
                                   "--log-level", "error", "--snapshot-every-records", "1000000000",
                                   "--snapshot-every-seconds", "0", "--listen", "unix:" + sock],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.n = 0

    def call(self, method, params=None):
        self.n += 1
        self.p.stdin.write(line("c%d" % self.n, method, params or {}))
        self.p.stdin.flush()
        answer = json.loads(self.p.stdout.readline())
        if "error" in answer:
            raise SystemExit("%s: %s" % (method, answer["error"]))
        return answer["result"]

    def timed(self, method, params=None):
        t = time.monotonic()
        result = self.call(method, params)
        return time.monotonic() - t, result


class OtherHost(threading.Thread):
    """Another host: uploads Screen Time days for another user on its own socket connection at a
    steady 200 a second, whether or not earlier ones were answered (as a web app's users would), so a
    stall shows in every upload queued behind it. Latency counts from when each upload was due."""
    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock, self.latencies, self.stop = sock, [], threading.Event()

    def run(self):
        tok = token(OTHER)
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.sock)
        f = s.makefile("rwb")
        f.write(line("e", "screentime.updateConnection", {"auth": tok, "enabled": True}))
        f.flush()
        f.readline()
        sent = {}
        done = threading.Event()

        def read():
            while True:
                l = f.readline()
                if not l:
                    return
                i = json.loads(l)["id"]
                self.latencies.append(time.monotonic() - sent.pop(i))
                if self.stop.is_set() and not sent:
                    done.set()
                    return
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        i, due = 0, time.monotonic()
        while not self.stop.is_set():
            i += 1
            date = "2025-%02d-%02d" % (1 + (i // 28) % 12, 1 + i % 28)
            sent[i] = due
            f.write(line(i, "screentime.upload", {"auth": tok, "date": date, "verifiedMinutes": i % 600}))
            f.flush()
            due += 0.005
            time.sleep(max(0, due - time.monotonic()))
        done.wait(30)
        s.close()


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else float("nan")


def history(binary, months, ordered, tok):
    with tempfile.TemporaryDirectory() as tmp:
        data, sock = os.path.join(tmp, "d"), os.path.join(tmp, "k.sock")
        k = Kernel(binary, data, sock)
        k.call("kernel.info")
        start_rss = rss(k.p.pid)
        # Every month is made before the first is sent, so the months follow each other as a client's
        # initial sync would, and the other host's uploads all fall during ingests.
        lines = [month_line(tok, m, ordered, months) for m in range(months)]
        last_uuids = lines[-1][1]
        other = OtherHost(sock)
        other.start()
        times, after_month = [], []
        for m in range(months):
            month = lines[m][0]
            lines[m] = None
            t = time.monotonic()
            k.p.stdin.write(month)
            k.p.stdin.flush()
            answer = json.loads(k.p.stdout.readline())
            times.append(time.monotonic() - t)
            if "error" in answer:
                raise SystemExit("month %d: %s" % (m, answer["error"]))
            after_month.append(rss(k.p.pid))
        other.stop.set()
        other.join()
        half = months // 2
        marginal = (after_month[-1] - after_month[half - 1]) / ((months - half) * SAMPLES) if months >= 2 else float("nan")
        overall = (after_month[-1] - start_rss) / (months * SAMPLES)
        # A feed page: the first, and one about half-way through the feed.
        first = statistics.median([k.timed("sync.changes", {"auth": tok, "limit": 100})[0] for _ in range(21)])
        cursor = None
        for _ in range(3):
            page = k.call("sync.changes", {"auth": tok, "limit": 1000, **({"since": cursor} if cursor else {})})
            cursor = page["cursor"]
        deep = statistics.median([k.timed("sync.changes", {"auth": tok, "limit": 100, "since": cursor})[0] for _ in range(21)])
        delete, report = k.timed("health.delete", {"auth": tok, "uuids": last_uuids[:1000]})
        assert report["deleted"] == 1000, report
        days = {"auth": tok, "from": time.strftime("%Y-%m-%d", time.gmtime(time.time() - 360 * 86400)),
                "to": time.strftime("%Y-%m-%d", time.gmtime())}
        summary = k.call("health.summary", days)
        import bench
        wal = k.call("kernel.info")["durability"]["walBytes"]
        k.call("kernel.snapshot", {"auth": bench.SERVICE})
        snap = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data) if f.endswith(".snap"))
        k.p.send_signal(signal.SIGKILL)
        k.p.wait()
        t = time.monotonic()
        again = Kernel(binary, data, sock + "2")
        again.call("kernel.info")
        restart = time.monotonic() - t
        same = again.call("health.summary", days) == summary
        again.p.stdin.close()
        again.p.wait()
        return {"times": times, "marginal": marginal, "overall": overall, "first": first, "deep": deep, "delete": delete,
                "restart": restart, "same": same, "other": other.latencies,
                "log": wal / (months * SAMPLES), "snapshot": snap / (months * SAMPLES - 1000)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--years", type=int)
    p.add_argument("--months", type=int, default=12)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", ".build", "release", "healthkernel"))
    p.add_argument("--baseline")
    a = p.parse_args()
    months = a.years * 12 if a.years else a.months
    tok = token(USER)
    builds = [("this build", a.binary)] + ([("baseline", a.baseline)] if a.baseline else [])
    print("One user, %d months of minute heart rate (%d samples each, %.1f million in all), one health.ingest per month, "
          "--fsync never; another host uploads on a second connection meanwhile" % (months, SAMPLES, months * SAMPLES / 1e6))
    for name, binary in builds:
        runs = {}
        for ordered in (False, True):
            r = runs[ordered] = history(binary, months, ordered, tok)
            k = min(6, max(1, months // 2))
            r["firstk"], r["lastk"] = statistics.median(r["times"][:k]), statistics.median(r["times"][-k:])
            label = "ordered UUIDs" if ordered else "random UUIDs"
            print("\n%s, %s (months in seconds: %s)" % (name, label, " ".join("%.2f" % t for t in r["times"])))
            rows = [
                ("per-month time, median of last %d / first %d" % (k, k), "%.2f / %.2f s = %.2fx" % (r["lastk"], r["firstk"], r["lastk"] / r["firstk"]), "at most 1.2x"),
                ("whole sync", "%.1f s" % sum(r["times"]), "under 120 s for 120 months"),
                ("resident bytes per sample, second half of the sync", "%.0f" % r["marginal"], "at most 200"),
                ("resident bytes per sample, whole sync (with the first month's request buffers)", "%.0f" % r["overall"], ""),
                ("log bytes per sample (before the snapshot) / snapshot bytes per sample", "%.0f / %.0f" % (r["log"], r["snapshot"]), ""),
                ("sync.changes limit 100, first page", "%.2f ms" % (r["first"] * 1000), "under 1 ms"),
                ("sync.changes limit 100, after 3,000 entries", "%.2f ms" % (r["deep"] * 1000), "under 1 ms"),
                ("health.delete of 1,000 UUIDs", "%.1f ms" % (r["delete"] * 1000), "under 50 ms"),
                ("restart from the snapshot after kill -9", "%.2f s%s" % (r["restart"], "" if r["same"] else " (SUMMARIES DIFFER)"), "under 10 s at 5 million"),
                ("other host's uploads during the sync, 200/s (%d): p99 / median / max" % len(r["other"]),
                 "%.1f / %.1f / %.0f ms" % (p99(r["other"]) * 1000, statistics.median(r["other"]) * 1000, max(r["other"]) * 1000),
                 "p99 under 100 ms"),
            ]
            for what, figure, target in rows:
                print("  %-82s %-22s %s" % (what, figure, target))
            sys.stdout.flush()
        print("\n  random / ordered, median month: %.2fx (target at most 1.2x)" % (
            statistics.median(runs[False]["times"]) / statistics.median(runs[True]["times"])))
        if name == "this build":
            # bench.py's table of targets shows this run's bytes per sample (random UUIDs, second half).
            with open(os.path.join(os.path.dirname(__file__), "results", "history-latest.json"), "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "months": months,
                           "residentBytesPerSample": runs[False]["marginal"], "residentBytesPerSampleWholeSync": runs[False]["overall"],
                           "monthSeconds": runs[False]["times"]}, f, indent=2)


if __name__ == "__main__":
    main()
