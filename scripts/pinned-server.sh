#!/usr/bin/env bash
# redis-server pinned to CPU 0, for `make bench` (whose clients run on CPU 1),
# so the server and the load generator do not steal each other's core.
exec taskset -c 0 "${VTRR_UNPINNED_SERVER:-redis-server}" "$@"
