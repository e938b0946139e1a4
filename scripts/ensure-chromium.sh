#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the browser test suite (tests/browser).
#
# Called by `make test` before pytest. Never fails the build: when Chromium cannot be installed
# (not root, no apt-get, no network) it says so and exits 0; the browser tests then skip with
# their reason. Never runs `playwright install` (it downloads a browser from outside).
set -u

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: chromium not found and cannot install it (needs root and apt-get);" \
         "the browser tests will be skipped." >&2
    exit 0
fi

echo "ensure-chromium: installing chromium with apt-get (about a minute)..." >&2
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null \
    && apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
    echo "ensure-chromium: installed $(chromium --version 2>/dev/null || echo chromium)." >&2
else
    echo "ensure-chromium: apt-get failed to install chromium;" \
         "the browser tests will be skipped." >&2
fi
exit 0
