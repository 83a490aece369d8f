"""A vtrr worker with nothing but Redis (redis-py).
Env: VTRR_URL, VTRR_QUEUE, VTRR_BACKOFF_MS, VTRR_CLUSTER=1 for a Redis Cluster."""
import os, sys, threading, time
import redis

URL = os.environ.get("VTRR_URL", "redis://127.0.0.1:6379")
if os.environ.get("VTRR_CLUSTER") == "1":  # any node's address; name queues with a {hash tag}
    r = redis.RedisCluster.from_url(URL)
else:
    r = redis.Redis.from_url(URL)
QUEUE = os.environ.get("VTRR_QUEUE", "files")
LEASE_MS, BLOCK_MS, MAX_TIMEOUTS, MAX_NACKS = 30_000, 2_000, 3, 3
BACKOFF_MS = int(os.environ.get("VTRR_BACKOFF_MS", "1000"))  # first retry's delay, doubled each time
EXIT_WHEN_IDLE = os.environ.get("VTRR_EXIT_WHEN_IDLE") == "1"

def call(*args):
    # While a cluster moves the queue's slot its commands answer TRYAGAIN
    # (redis-py retries a few times, then raises): wait and try again.
    while True:
        try:
            return r.execute_command(*args)
        except (redis.exceptions.TryAgainError, redis.exceptions.ClusterError):
            time.sleep(0.05)

def run_task(item_id, payload):  # your work; must be idempotent (at-least-once)
    if payload.startswith(b"fail"):  # stands in for a task that keeps failing
        raise RuntimeError("task failed")
    print(f"processed {item_id.decode()} {payload.decode()}", flush=True)

def keep_renewing(item_id, token, done):
    # Long tasks: extend the lease while running; stop once it is lost.
    while not done.wait(LEASE_MS / 3000):
        if not call("VTRR.RENEW", QUEUE, item_id, token, LEASE_MS):
            return

# Give up on an item that keeps killing workers or failing: the queue moves it
# to the dead-letter set (VTRR.DEAD lists it, VTRR.REVIVE retries it).
call("VTRR.POLICY", QUEUE, "MAX-TIMEOUTS", MAX_TIMEOUTS, "MAX-NACKS", MAX_NACKS)

while True:
    leased = call("VTRR.LEASE", QUEUE, LEASE_MS, "BLOCK", BLOCK_MS, "WITHCOUNTERS")
    if leased is None:  # nothing arrived within BLOCK_MS
        if EXIT_WHEN_IDLE:
            break
        continue
    item_id, payload, token, timeouts, nacks = leased
    done = threading.Event()
    threading.Thread(target=keep_renewing, args=(item_id, token, done), daemon=True).start()
    try:
        run_task(item_id, payload)
    except Exception as error:  # retry later: 1, 2, 4, ... times BACKOFF_MS
        delay = BACKOFF_MS * 2**nacks
        print(f"failed {item_id.decode()} ({error}), attempt {nacks + 1}, nack DELAY {delay}",
              file=sys.stderr, flush=True)
        call("VTRR.NACK", QUEUE, item_id, token, "DELAY", delay)
    else:
        call("VTRR.ACK", QUEUE, item_id, token)  # 0 if the lease was lost: harmless
    finally:
        done.set()
