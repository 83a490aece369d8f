"""Writes tests/fixtures/native-v2.rdb and native-v2.json with the module of
an earlier version (encoding version 2: commit b41fa22), a native queue in
every state, for tests/native.rs's upgrade test.

    python3 scripts/native-fixture.py <old libvtrr.so> tests/fixtures <free port>
"""
import atexit, json, os, shutil, subprocess, sys, time
import redis

so, out_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
work = "/tmp/fixture-gen"
shutil.rmtree(work, ignore_errors=True); os.makedirs(work)
r = redis.Redis(port=port, protocol=2)
try:
    r.ping()
    sys.exit(f"port {port} is taken")
except redis.ConnectionError:
    pass
proc = subprocess.Popen(["redis-server", "--port", str(port), "--dir", work, "--save", "",
                         "--appendonly", "no", "--loadmodule", so, "default-layout", "native"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
atexit.register(lambda: (proc.terminate(), proc.wait()))
for _ in range(100):
    try:
        r.ping(); break
    except Exception:
        time.sleep(0.1)
q = "legacy"
x = r.execute_command
# Queued over three partitions with weights, binary ids and payloads.
x("VTRR.ENQUEUE", q, "a", "a1", 1, "pa1", "a", "a2", 2, "pa2", "b", "b1", 1, "pb1",
  "b", b"b\x00bin", 3, b"\xff\x00payload", "c", "c1", 1, "pc1", "c", "c2", 1, "pc2")
for i in range(300):  # past the listpack sizes of a keys-layout queue
    x("VTRR.ENQUEUE", q, f"t{i % 7}", f"bulk{i}", 1 + i % 3, f"payload-{i}")
# Every time lies years ahead (at most MAX_LEASE_MS, ten years): a fixture whose
# leases or delays fall due while it is in use makes its test fail that day.
far = 300_000_000_000
# Leased, long leases: their tokens ack after the reload.
leases = []
for _ in range(3):
    got = x("VTRR.LEASE", q, far)
    leases.append([got[0].hex(), got[2].hex()] if got else None)
# Delayed far ahead, dead by NACK DEAD, counters by NACK with a delay.
x("VTRR.DEFER", q, far, "d", "d1", 1, "pd1")
got = x("VTRR.LEASE", q, far)
x("VTRR.NACK", q, got[0], got[2], "DEAD")
got = x("VTRR.LEASE", q, far)
x("VTRR.NACK", q, got[0], got[2])
got = x("VTRR.LEASE", q, far)
x("VTRR.NACK", q, got[0], got[2], "DELAY", far)
# Tenant controls: a paused partition (its items held), a capped one, a policy.
x("VTRR.PAUSE", q, "t3")
x("VTRR.LIMIT", q, "t4", "CONCURRENCY", 1)
x("VTRR.POLICY", q, "MAX-NACKS", 5)
assert x("VTRR.CHECK", q) == [], x("VTRR.CHECK", q)
suffixes = ["queue", "current_virtual_time", "partition_virtual_time", "task", "meta", "inflight",
            "inflight_task", "lease", "timeouts", "delayed", "delayed_task", "nacks", "dead",
            "dead_task", "dead_reason", "policy", "held", "held_at", "partitions", "parking",
            "rank_queued", "rank_waiting", "rank_leased", "rank_dead", "totals"]
def hexed(v):
    if isinstance(v, list):
        return [hexed(e) for e in v]
    if v is None:
        return None
    if isinstance(v, int):
        return v
    return v.hex()
keys = {s: hexed(x("VTRR.INSPECT", q, s)) for s in suffixes}
x("SAVE")
proc.terminate(); proc.wait()
shutil.copy(os.path.join(work, "dump.rdb"), os.path.join(out_dir, "native-v2.rdb"))
with open(os.path.join(out_dir, "native-v2.json"), "w") as f:
    json.dump({"queue": q, "leases": [l for l in leases if l], "keys": keys}, f, indent=1, sort_keys=True)
print("ok", {s: len(v) if isinstance(v, list) else v for s, v in keys.items()})
