#!/usr/bin/env bash
# Build the release archives of talosprov:
#   target/dist/talosprov-<version>-<target>.tar.gz   the static binary, README.md, LICENSE
#   target/dist/SHA256SUMS                            sha256sum of every archive of <version>
#
# Usage: scripts/dist.sh [TARGET...]
#   TARGET defaults to x86_64-unknown-linux-musl, plus aarch64-unknown-linux-musl
#   when a cross linker is available (cargo-zigbuild with zig, e.g. from PyPI:
#   pip install cargo-zigbuild ziglang).
#
# Settings (environment):
#   TALOSPROV_DIST_PROFILE  cargo profile (default: release, fat LTO; the tests use
#                           dist-check, a lighter one, to fit CI's time)
#   TALOSPROV_DIST_DIR      where the archives go (default: target/dist)
#   CARGO_TARGET_DIR        cargo's build folder (default: target)
#   SOURCE_DATE_EPOCH       the archive's timestamps (default: the commit's time)
#   TALOSPROV_GIT_COMMIT    the commit `talosprov version` names (default: HEAD, with
#                           -modified added when the working tree has uncommitted changes)
#
# The same commit gives the same archives, byte for byte, whatever the checkout's
# path or the build folder: no timestamps but the commit's, sorted tar entries
# with numeric owner 0, gzip without name or time, and every absolute path of
# the build (checkout, cargo home, rustup home, build folder) remapped by
# rustc's --remap-path-prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

say() { printf '== %s\n' "$*"; }
fail() { printf 'dist.sh: %s\n' "$*" >&2; exit 1; }

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || fail "no version under [workspace.package] in Cargo.toml"
profile=${TALOSPROV_DIST_PROFILE:-release}
dist=${TALOSPROV_DIST_DIR:-target/dist}
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$dist" "$target_dir"
dist=$(cd "$dist" && pwd)
target_dir=$(cd "$target_dir" && pwd)

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) \
    || fail "not a git checkout: set SOURCE_DATE_EPOCH (and TALOSPROV_GIT_COMMIT)"
fi
export SOURCE_DATE_EPOCH
if [ -z "${TALOSPROV_GIT_COMMIT:-}" ] && git rev-parse HEAD >/dev/null 2>&1; then
  TALOSPROV_GIT_COMMIT=$(git rev-parse HEAD)
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "dist.sh: warning: the working tree has uncommitted changes; the archives are not those of commit $(git rev-parse --short HEAD), and say so (commit ${TALOSPROV_GIT_COMMIT:0:12}…-modified)" >&2
    TALOSPROV_GIT_COMMIT="$TALOSPROV_GIT_COMMIT-modified"
  fi
  export TALOSPROV_GIT_COMMIT
fi

have_zigbuild() {
  command -v cargo-zigbuild >/dev/null 2>&1 || return 1
  command -v zig >/dev/null 2>&1 || python3 -c 'import ziglang' >/dev/null 2>&1 || return 1
}

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(x86_64-unknown-linux-musl)
  if have_zigbuild; then
    targets+=(aarch64-unknown-linux-musl)
  else
    say "aarch64-unknown-linux-musl skipped: no cross linker (pip install cargo-zigbuild ziglang)"
  fi
fi

ensure_target() {
  local t=$1
  if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$t"; then
    say "rustup target add $t"
    rustup target add "$t"
  fi
}

# rustc flags, joined by 0x1f as CARGO_ENCODED_RUSTFLAGS wants, so that paths
# with spaces survive. A later --remap-path-prefix wins over an earlier one, so
# the prefixes go from the shortest to the longest: a folder inside another
# (the build folder or CARGO_HOME inside the checkout, as in CI) keeps its own
# name, whatever the layout.
rustflags() {
  local cargo_home=${CARGO_HOME:-$HOME/.cargo} rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
  local pairs=(
    "$cargo_home=/cargo"
    "$rustup_home=/rustup"
    "$repo=/talosprov"
    "$target_dir=/talosprov/target"
  )
  local flags=() pair
  while IFS= read -r pair; do
    flags+=("--remap-path-prefix=$pair")
  done < <(for pair in "${pairs[@]}"; do printf '%s\t%s\n' "${#pair}" "$pair"; done \
    | LC_ALL=C sort -n | cut -f2-)
  flags+=("-Ctarget-feature=+crt-static")
  local IFS=$'\x1f'
  printf '%s' "${flags[*]}"
}

build() {
  local t=$1 builder=(cargo build)
  case "$t" in
    x86_64-unknown-linux-musl)
      if ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1 && ! command -v musl-gcc >/dev/null 2>&1; then
        if have_zigbuild; then builder=(cargo zigbuild); else
          fail "$t needs a musl C compiler for ring: install musl-tools (Debian, Ubuntu) or cargo-zigbuild and ziglang (PyPI)"
        fi
      fi
      ;;
    *-linux-musl*)
      have_zigbuild || fail "$t needs a cross linker: pip install cargo-zigbuild ziglang"
      builder=(cargo zigbuild)
      ;;
    *) fail "$t: only linux-musl targets make static archives" ;;
  esac
  ensure_target "$t"
  say "building talosprov $version for $t (profile $profile)"
  CARGO_ENCODED_RUSTFLAGS=$(rustflags) CARGO_TARGET_DIR=$target_dir \
    "${builder[@]}" --locked --profile "$profile" --target "$t" --bin talosprov
}

package() {
  local t=$1 name="talosprov-$version-$1"
  local out_dir=$profile
  [ "$profile" = dev ] && out_dir=debug
  local bin="$target_dir/$t/$out_dir/talosprov"
  [ -x "$bin" ] || fail "no binary at $bin"
  local stage
  stage=$(mktemp -d)
  mkdir "$stage/$name"
  install -m 0755 "$bin" "$stage/$name/talosprov"
  install -m 0644 README.md LICENSE "$stage/$name/"
  find "$stage/$name" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  LC_ALL=C tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$stage" -cf - "$name" \
    | gzip -9 -n > "$dist/$name.tar.gz.tmp"
  mv "$dist/$name.tar.gz.tmp" "$dist/$name.tar.gz"
  rm -rf "$stage"
  say "wrote ${dist#"$repo"/}/$name.tar.gz"
}

for t in "${targets[@]}"; do
  build "$t"
  package "$t"
done

# SHA256SUMS lists every archive of this version in the folder, sorted.
(
  cd "$dist"
  LC_ALL=C ls talosprov-"$version"-*.tar.gz | LC_ALL=C sort | xargs sha256sum > SHA256SUMS.tmp
  mv SHA256SUMS.tmp SHA256SUMS
)
say "wrote ${dist#"$repo"/}/SHA256SUMS"
cat "$dist/SHA256SUMS"
