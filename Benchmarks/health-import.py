#!/usr/bin/env python3
"""#56 item 5: `healthkernel health import-export` on a generated Apple Health export of --gib GiB.

Writes a synthetic export.xml (a watch and a phone counting steps every 10 minutes, heart rate every 2
minutes with metadata, five sleep stages a night with HKTimeZone, a daily run; about 1,000 elements a day,
as many days back from today as the size takes), starts a release kernel serving a Unix socket on a data
dir, and imports the file for one user through that socket (--connect) while another user's connection
sends a write (a one-sample health.ingest) and a read (a month's health.summary) in turn every 50 ms.
Prints the import's summary, its rate, the importer's peak resident memory (/usr/bin/time), the kernel's
resident memory after, and the other user's latencies (p50/p99/max, writes and reads apart) against the
same probe on the idle kernel. Nothing is compared against a floor: the figure to watch is that the
importer's memory does not grow with the file and the other user's reads stay fast.

    python3 Benchmarks/health-import.py [--gib 2] [--binary .build/release/healthkernel] [--batch-size 5000]
"""
import argparse, datetime, json, os, random, socket, subprocess, sys, tempfile, threading, time, uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(path, target):
    rnd = random.Random(56)
    days = max(1, target // 330_000)  # about 380 KB a day: start far enough back that no day is in the future
    day = datetime.datetime(2026, 11, 1) - datetime.timedelta(days=days)
    watch = 'device="&lt;&lt;HKDevice: 0x28{0:x}&gt;, name:Apple Watch, manufacturer:Apple Inc., model:Watch, hardware:Watch6,1, software:10.0&gt;"'
    phone = 'device="&lt;&lt;HKDevice: 0x28{0:x}&gt;, name:iPhone, manufacturer:Apple Inc., model:iPhone, hardware:iPhone14,2, software:17.0&gt;"'
    f = lambda t: t.strftime('%Y-%m-%d %H:%M:%S +0100')
    written = elements = 0
    with open(path, 'w', buffering=1 << 20) as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n<HealthData locale="en_US">\n <ExportDate value="2026-12-01 12:00:00 +0100"/>\n')
        while written < target:
            lines = []
            for m in range(0, 1440, 10):
                s = day + datetime.timedelta(minutes=m); e = s + datetime.timedelta(minutes=10)
                for name, dev in (("Apple Watch", watch), ("iPhone", phone)):
                    lines.append(f' <Record type="HKQuantityTypeIdentifierStepCount" sourceName="{name}" {dev.format(rnd.randrange(1 << 20))} unit="count" '
                                 f'creationDate="{f(e)}" startDate="{f(s)}" endDate="{f(e)}" value="{rnd.randrange(900)}"/>\n')
            for m in range(0, 1440, 2):
                s = day + datetime.timedelta(minutes=m)
                lines.append(f' <Record type="HKQuantityTypeIdentifierHeartRate" sourceName="Apple Watch" {watch.format(rnd.randrange(1 << 20))} unit="count/min" '
                             f'startDate="{f(s)}" endDate="{f(s)}" value="{rnd.randrange(50, 150)}">\n  <MetadataEntry key="HKMetadataKeyHeartRateMotionContext" value="0"/>\n </Record>\n')
            for k, stage in enumerate(['AsleepCore', 'AsleepDeep', 'AsleepREM', 'Awake', 'AsleepCore']):
                s = day - datetime.timedelta(hours=1) + datetime.timedelta(minutes=90 * k); e = s + datetime.timedelta(minutes=85)
                lines.append(f' <Record type="HKCategoryTypeIdentifierSleepAnalysis" sourceName="Apple Watch" startDate="{f(s)}" endDate="{f(e)}" '
                             f'value="HKCategoryValueSleepAnalysis{stage}">\n  <MetadataEntry key="HKTimeZone" value="Europe/Paris"/>\n </Record>\n')
            s = day + datetime.timedelta(hours=18)
            lines.append(f' <Workout workoutActivityType="HKWorkoutActivityTypeRunning" duration="30" durationUnit="min" totalDistance="5.2" totalDistanceUnit="km" '
                         f'sourceName="Apple Watch" startDate="{f(s)}" endDate="{f(s + datetime.timedelta(minutes=31))}"/>\n')
            text = ''.join(lines); out.write(text); written += len(text); elements += len(lines)
            day += datetime.timedelta(days=1)
        out.write('</HealthData>\n')
    return elements


def probe(path, token, stop, result):
    s = socket.socket(socket.AF_UNIX); s.connect(path); f = s.makefile('rwb')
    writes, reads, i = [], [], 0
    while not stop.is_set():
        i += 1
        if i % 2:
            params = {"auth": token, "samples": [{"uuid": str(uuid.uuid4()), "type": "HKQuantityTypeIdentifierStepCount", "value": 10, "unit": "count",
                                                  "start": "2026-03-02T10:00:00Z", "end": "2026-03-02T10:01:00Z"}]}
            method = "health.ingest"
        else:
            params, method = {"auth": token, "from": "2026-03-01", "to": "2026-03-31"}, "health.summary"
        t = time.perf_counter()
        f.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode()); f.flush()
        line = f.readline()
        (writes if i % 2 else reads).append((time.perf_counter() - t) * 1000)
        if b'"error"' in line: raise SystemExit(f"probe: {line!r}")
        time.sleep(0.05)
    def stats(l):
        l.sort(); return {"n": len(l), "p50_ms": round(l[len(l) // 2], 2), "p99_ms": round(l[int(len(l) * 0.99)], 2), "max_ms": round(l[-1], 2)}
    result.update(writes=stats(writes), reads=stats(reads))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--gib', type=float, default=2)
    ap.add_argument('--binary', default=os.path.join(ROOT, '.build/release/healthkernel'))
    ap.add_argument('--batch-size', type=int, default=5000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix='hk-import-bench-')
    export = os.path.join(work, 'export.xml')
    t = time.time(); n = generate(export, int(a.gib * (1 << 30)))
    print(f"generated {os.path.getsize(export) >> 20} MiB, {n} elements in {time.time() - t:.0f} s", file=sys.stderr)
    data, sock = os.path.join(work, 'data'), os.path.join(work, 'hk.sock')
    kernel = subprocess.Popen([a.binary, 'serve', '--listen', 'unix:' + sock, '--no-stdin', '--data-dir', data], stderr=subprocess.DEVNULL)
    while not os.path.exists(sock): time.sleep(0.05)
    token = lambda user: subprocess.check_output([a.binary, 'token', '--user', user, '--ttl', '86400', '--data-dir', data]).decode().strip()
    importer, other = str(uuid.uuid4()), str(uuid.uuid4())
    idle, stop = {}, threading.Event()
    th = threading.Thread(target=probe, args=(sock, token(other), stop, idle)); th.start(); time.sleep(10); stop.set(); th.join()
    busy, stop = {}, threading.Event()
    th = threading.Thread(target=probe, args=(sock, token(other), stop, busy)); th.start()
    run = subprocess.run(['/usr/bin/time', '-f', '%M', a.binary, 'health', 'import-export', '--user', importer, '--timezone', 'Europe/Paris',
                          '--batch-size', str(a.batch_size), '--connect', 'unix:' + sock, '--token', token(importer), export],
                         capture_output=True, text=True, check=True)
    stop.set(); th.join()
    summary = json.loads(run.stdout)
    rss = int(open(f'/proc/{kernel.pid}/status').read().split('VmRSS:')[1].split()[0])
    kernel.terminate(); kernel.wait()
    items = sum(summary['imported'].values()) + summary['unchanged']
    print(json.dumps({"summary": summary, "items_per_s": round(items / summary['seconds']),
                      "MiB_per_s": round(summary['bytes'] / (1 << 20) / summary['seconds'], 1),
                      "importer_peak_rss_MiB": round(int(run.stderr.strip().splitlines()[-1]) / 1024, 1), "kernel_rss_after_MiB": round(rss / 1024),
                      "other_user_idle": idle, "other_user_during_import": busy}, indent=1))
    subprocess.run(['rm', '-rf', work])


if __name__ == '__main__':
    main()
