#!/bin/sh
# Install the tools of the CI image into a root folder: talosprov from a release
# archive of scripts/dist.sh (checked against its SHA256SUMS), and helm and
# kubectl, downloaded from their release locations or given as files, each
# checked against a pinned SHA-256. The Containerfile runs this script;
# tests/image/check_image.sh runs it into a temporary root.
#
# Usage: scripts/image-install.sh --root DIR --dist DIR [options]
#   --root DIR            install talosprov, helm and kubectl into DIR/usr/local/bin,
#                         and talosprov's README.md and LICENSE (helm's LICENSE)
#                         into DIR/usr/local/share/doc/talosprov (helm)
#   --dist DIR            folder with talosprov-<version>-<target>.tar.gz and SHA256SUMS
#   --arch ARCH           amd64 or arm64 (x86_64 and aarch64 are taken too);
#                         empty or absent: this machine's (uname -m)
#   --version V           talosprov's version; empty or absent: the one version
#                         SHA256SUMS lists for the target
#   --helm-archive FILE   helm-<version>-linux-<arch>.tar.gz, already downloaded
#   --kubectl FILE        the kubectl binary, already downloaded
#                         (without these two, both are downloaded)
#   --helm-version V, --helm-sha256 HEX, --kubectl-version V, --kubectl-sha256 HEX
#                         the pins, for the architecture installed; they win over
#                         the environment below
# Environment (the Containerfile's ARGs):
#   HELM_VERSION, HELM_SHA256_AMD64, HELM_SHA256_ARM64
#   KUBECTL_VERSION, KUBECTL_SHA256_AMD64, KUBECTL_SHA256_ARM64
#   HELM_BASE_URL     default https://get.helm.sh
#   KUBECTL_BASE_URL  default https://dl.k8s.io/release
#
# Every file is checked before anything is written under --root: a checksum
# mismatch stops the script with the file's name, the expected and the actual
# digest, and installs nothing. Needs only a POSIX sh, sha256sum, tar with
# gzip, awk and grep (busybox has them all), and curl or wget to download.
set -eu

prog=image-install.sh
say() { printf '%s: %s\n' "$prog" "$*"; }
die() {
  printf '%s: error: %s\n' "$prog" "$*" >&2
  exit 1
}
usage() { sed -n '2,/^set -eu$/{/^#/s/^# \{0,1\}//p}' "$0"; }

root=
dist=
arch=
version=
helm_archive=
kubectl_file=
helm_version=${HELM_VERSION:-}
kubectl_version=${KUBECTL_VERSION:-}
helm_sha=
kubectl_sha=
helm_base=${HELM_BASE_URL:-https://get.helm.sh}
kubectl_base=${KUBECTL_BASE_URL:-https://dl.k8s.io/release}

while [ "$#" -gt 0 ]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --root | --dist | --arch | --version | --helm-archive | --kubectl | \
      --helm-version | --helm-sha256 | --kubectl-version | --kubectl-sha256)
      [ "$#" -ge 2 ] || die "$1 needs a value (see --help)"
      case $1 in
        --root) root=$2 ;;
        --dist) dist=$2 ;;
        --arch) arch=$2 ;;
        --version) version=$2 ;;
        --helm-archive) helm_archive=$2 ;;
        --kubectl) kubectl_file=$2 ;;
        --helm-version) helm_version=$2 ;;
        --helm-sha256) helm_sha=$2 ;;
        --kubectl-version) kubectl_version=$2 ;;
        --kubectl-sha256) kubectl_sha=$2 ;;
      esac
      shift 2
      ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[ -n "$root" ] || die "--root DIR is required (see --help)"
[ -n "$dist" ] || die "--dist DIR is required (see --help)"
[ -d "$dist" ] || die "--dist $dist is not a folder"

# The architecture: Docker's and Go's name (amd64, arm64) and Rust's target.
[ -n "$arch" ] || arch=$(uname -m)
case $arch in
  amd64 | x86_64)
    arch=amd64
    triple=x86_64-unknown-linux-musl
    : "${helm_sha:=${HELM_SHA256_AMD64:-}}"
    : "${kubectl_sha:=${KUBECTL_SHA256_AMD64:-}}"
    ;;
  arm64 | aarch64)
    arch=arm64
    triple=aarch64-unknown-linux-musl
    : "${helm_sha:=${HELM_SHA256_ARM64:-}}"
    : "${kubectl_sha:=${KUBECTL_SHA256_ARM64:-}}"
    ;;
  *) die "unsupported architecture '$arch': the image is built for amd64 and arm64" ;;
esac

# The pins are checked for form before anything is downloaded.
matches() { printf '%s\n' "$2" | grep -Eq "$1"; }
need_version() { # what value
  matches '^v[0-9]+\.[0-9]+\.[0-9]+$' "$2" \
    || die "$1 '$2' is not a release version like v1.2.3"
}
need_sha256() { # what value
  matches '^[0-9a-f]{64}$' "$2" \
    || die "$1 '$2' is not a SHA-256 (64 lowercase hexadecimal digits)"
}
need_version "helm version (HELM_VERSION)" "$helm_version"
need_version "kubectl version (KUBECTL_VERSION)" "$kubectl_version"
arch_upper=$(printf '%s' "$arch" | tr '[:lower:]' '[:upper:]')
need_sha256 "helm's SHA-256 for $arch (HELM_SHA256_$arch_upper)" "$helm_sha"
need_sha256 "kubectl's SHA-256 for $arch (KUBECTL_SHA256_$arch_upper)" "$kubectl_sha"

sums=$dist/SHA256SUMS
[ -f "$sums" ] || die "no SHA256SUMS in $dist"

# talosprov's archive: the one SHA256SUMS lists for this version and target.
# (sha256sum marks a file read in binary mode with a leading '*'.)
listed() { awk '{ f = $2; sub(/^\*/, "", f); print f }' "$sums"; }
if [ -z "$version" ]; then
  names=$(listed | grep -E "^talosprov-[^/]+-$triple\.tar\.gz$" || true)
  count=$(printf '%s' "$names" | grep -c . || true)
  [ "$count" -eq 1 ] \
    || die "give --version: SHA256SUMS lists $count archives for $triple${names:+ ($(printf '%s' "$names" | tr '\n' ' '))}"
  version=${names#talosprov-}
  version=${version%-"$triple".tar.gz}
fi
matches '^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$' "$version" \
  || die "talosprov version '$version' is not a version like 1.2.3"
top=talosprov-$version-$triple
name=$top.tar.gz
archive=$dist/$name
talosprov_sha=$(awk -v n="$name" '{ f = $2; sub(/^\*/, "", f); if (f == n) { print $1; exit } }' "$sums")
[ -n "$talosprov_sha" ] || die "$sums lists no $name"
need_sha256 "the SHA-256 that SHA256SUMS gives $name" "$talosprov_sha"
[ -f "$archive" ] || die "no $name in $dist (SHA256SUMS lists it)"

work=$(mktemp -d "${TMPDIR:-/tmp}/image-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM

# verify FILE EXPECTED NAME: FILE's SHA-256 is EXPECTED, or the script stops.
verify() {
  actual=$(sha256sum < "$1") || die "cannot read $1"
  actual=${actual%%[!0-9a-f]*}
  [ "$actual" = "$2" ] \
    || die "checksum mismatch for $3 ($1): expected sha256 $2, got sha256 $actual; nothing was installed"
  say "sha256 ok: $3 $actual"
}

# fetch URL FILE: download with curl or wget, three tries. The download is
# trusted for nothing: its SHA-256 is checked next.
fetch() {
  if command -v curl > /dev/null 2>&1; then
    get() { curl -fsSL -o "$2" "$1"; }
  elif command -v wget > /dev/null 2>&1; then
    get() { wget -q -O "$2" "$1"; }
  else
    die "neither curl nor wget to download $1 (or give the file, see --help)"
  fi
  say "downloading $1"
  for try in 1 2 3; do
    if get "$1" "$2"; then return 0; fi
    [ "$try" -eq 3 ] || sleep "$try"
  done
  die "cannot download $1"
}

# 1. talosprov: the archive against SHA256SUMS, then only its three files.
verify "$archive" "$talosprov_sha" "$name"
mkdir "$work/talosprov"
tar -xzf "$archive" -C "$work/talosprov" "$top/talosprov" "$top/README.md" "$top/LICENSE" \
  || die "$name does not hold $top/talosprov, README.md and LICENSE"
t=$work/talosprov/$top
for f in talosprov README.md LICENSE; do
  if [ ! -f "$t/$f" ] || [ -L "$t/$f" ]; then die "$top/$f in $name is not a regular file"; fi
done

# 2. helm: the release archive, then linux-<arch>/helm and its LICENSE.
helm_name=helm-$helm_version-linux-$arch.tar.gz
if [ -n "$helm_archive" ]; then
  [ -f "$helm_archive" ] || die "--helm-archive $helm_archive is not a file"
  helm_file=$helm_archive
else
  helm_file=$work/$helm_name
  fetch "$helm_base/$helm_name" "$helm_file"
fi
verify "$helm_file" "$helm_sha" "$helm_name"
mkdir "$work/helm"
tar -xzf "$helm_file" -C "$work/helm" || die "cannot unpack $helm_name"
h=$work/helm/linux-$arch
if [ ! -f "$h/helm" ] || [ -L "$h/helm" ]; then die "$helm_name holds no linux-$arch/helm"; fi

# 3. kubectl: the binary itself.
kubectl_url=$kubectl_base/$kubectl_version/bin/linux/$arch/kubectl
if [ -n "$kubectl_file" ]; then
  [ -f "$kubectl_file" ] || die "--kubectl $kubectl_file is not a file"
else
  kubectl_file=$work/kubectl
  fetch "$kubectl_url" "$kubectl_file"
fi
verify "$kubectl_file" "$kubectl_sha" "kubectl $kubectl_version linux/$arch"

# 4. Everything matched: install. Each file goes in under a temporary name and
# is renamed, so that no half-copied tool is ever on PATH.
bin=$root/usr/local/bin
doc=$root/usr/local/share/doc
mkdir -p "$bin" "$doc/talosprov" "$doc/helm"
put() { # SOURCE DEST MODE
  if ! { cp "$1" "$2.partial" && chmod "$3" "$2.partial" && mv -f "$2.partial" "$2"; }; then
    die "cannot install $2"
  fi
}
put "$t/talosprov" "$bin/talosprov" 0755
put "$h/helm" "$bin/helm" 0755
put "$kubectl_file" "$bin/kubectl" 0755
put "$t/README.md" "$doc/talosprov/README.md" 0644
put "$t/LICENSE" "$doc/talosprov/LICENSE" 0644
if [ -f "$h/LICENSE" ]; then put "$h/LICENSE" "$doc/helm/LICENSE" 0644; fi
say "installed talosprov $version ($triple), helm $helm_version and kubectl $kubectl_version (linux/$arch) into $bin"
