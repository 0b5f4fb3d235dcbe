#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need (fakepve
# into a venv under target/), then runs every test. README.md and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import fakepve' 2>/dev/null; then
  echo "== installing fakepve 0.5.0 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'fakepve==0.5.0'
fi
export TALOSPROV_TEST_PYTHON="$PWD/$venv/bin/python"

# The unit tests of every crate, the one integration-test binary (tests/it) and the
# doc tests.

cargo test --locked --workspace --all-features -- --test-threads="${TALOSPROV_TEST_THREADS:-4}"
