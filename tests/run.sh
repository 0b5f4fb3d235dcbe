#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need (fakepve,
# and jsonschema for the independent check of the topology's JSON Schema, into a
# venv under target/), checks for kubectl, then runs every test. README.md and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import fakepve' 2>/dev/null; then
  echo "== installing fakepve 0.5.0 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'fakepve==0.5.0'
fi
if ! "$venv/bin/python" -c 'import jsonschema' 2>/dev/null; then
  echo "== installing jsonschema 4.26.0 into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'jsonschema==4.26.0'
fi
export TALOSPROV_TEST_PYTHON="$PWD/$venv/bin/python"

# kubectl is the independent client the Kubernetes tests check the simulated cluster
# with; it cannot be installed from here.
if ! command -v kubectl >/dev/null; then
  echo "kubectl is needed by the tests: install it (https://kubernetes.io/docs/tasks/tools/," >&2
  echo "or your distribution's kubernetes-client package) and run tests/run.sh again" >&2
  exit 1
fi

# The unit tests of every crate, the one integration-test binary (tests/it) and the
# doc tests.

cargo test --locked --workspace --all-features -- --test-threads="${TALOSPROV_TEST_THREADS:-4}"
