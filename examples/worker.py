"""A vtrr worker with nothing but Redis (redis-py). Env: VTRR_URL, VTRR_QUEUE."""
import os, sys, threading
import redis

r = redis.Redis.from_url(os.environ.get("VTRR_URL", "redis://127.0.0.1:6379"))
QUEUE = os.environ.get("VTRR_QUEUE", "files")
LEASE_MS, BLOCK_MS, MAX_TIMEOUTS = 30_000, 2_000, 3
EXIT_WHEN_IDLE = os.environ.get("VTRR_EXIT_WHEN_IDLE") == "1"

def run_task(item_id, payload):  # your work; must be idempotent (at-least-once)
    print(f"processed {item_id.decode()} {payload.decode()}", flush=True)

def keep_renewing(item_id, token, done):
    # Long tasks: extend the lease while running; stop once it is lost.
    while not done.wait(LEASE_MS / 3000):
        if not r.execute_command("VTRR.RENEW", QUEUE, item_id, token, LEASE_MS):
            return

while True:
    leased = r.execute_command("VTRR.LEASE", QUEUE, LEASE_MS, "BLOCK", BLOCK_MS)
    if leased is None:  # nothing arrived within BLOCK_MS
        if EXIT_WHEN_IDLE:
            break
        continue
    item_id, payload, token, timeouts = leased
    done = threading.Event()
    threading.Thread(target=keep_renewing, args=(item_id, token, done), daemon=True).start()
    try:
        if timeouts >= MAX_TIMEOUTS:  # it keeps killing workers: give up on it
            print(f"dead-letter {item_id.decode()}", file=sys.stderr, flush=True)
        else:
            run_task(item_id, payload)
    finally:
        done.set()
        r.execute_command("VTRR.ACK", QUEUE, item_id, token)  # 0 if the lease was lost: harmless
