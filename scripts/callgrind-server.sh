#!/usr/bin/env bash
# redis-server under callgrind, for `make bench-instructions`: every
# instruction the server runs is counted; the bench zeroes and dumps the
# counters around each measurement into $VTRR_CALLGRIND_DIR.
exec valgrind --tool=callgrind --callgrind-out-file="${VTRR_CALLGRIND_DIR:?}/callgrind.%p" \
  "${VTRR_UNCOUNTED_SERVER:-redis-server}" "$@"
