#!/usr/bin/env bash
# Installs the Debian packages the integration tests need, when they are missing:
# prometheus (prometheus, promtool), prometheus-alertmanager (alertmanager, amtool) and
# chromium (the headless browser tests/test_browser.py loads the HTML pages in) and Java 17
# (openjdk-17-jre-headless: the Spark engine's JVM, tests/test_engines.py); openssl, systemd
# (systemd-analyze), util-linux (unshare) and faketime (libfaketime, which steps a daemon's wall
# clock) for the TLS, unit and fault tests; linux-libc-dev (syscall numbers) for the unit's
# syscall filter. A test whose tool
# is missing is skipped on a developer's machine and fails under CI (tests/ci.py).
set -euo pipefail
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
  || missing+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # the TLS tests' certificates
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)  # the unit's verify
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)  # the state-dir fault tests
command -v faketime >/dev/null 2>&1 || missing+=(faketime)  # libfaketime: a clock stepped back
# the kernel's syscall numbers, for the unit's SystemCallFilter run under seccomp
[ -f /usr/include/x86_64-linux-gnu/asm/unistd_64.h ] || [ "$(uname -m)" != x86_64 ] \
  || missing+=(linux-libc-dev)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
