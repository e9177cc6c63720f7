#!/bin/sh
# The busybox image's half of the example suite: a write lands, the network is closed.
set -eu
echo made-inside > written-by-the-suite.txt
test "$(cat written-by-the-suite.txt)" = made-inside
# The caller names a port it listens on, on the host's loopback: reachable from outside.
if nc -w 2 127.0.0.1 "$SPRAWL_EXAMPLE_PORT" </dev/null 2>/dev/null; then
  echo "network reachable" >&2
  exit 1
fi
echo "example suite: 2 checks passed"
