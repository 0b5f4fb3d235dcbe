#!/usr/bin/env bash
# The release archive, checked as a user receives it (tests/run.sh runs this):
#  1. scripts/dist.sh builds the x86_64 musl archive and SHA256SUMS from this
#     checkout, and again from a copy of it at another path with its own build
#     folder: the two archives have the same SHA-256;
#  2. the binary is statically linked: `file` says so, and it has no ELF
#     interpreter and no NEEDED library;
#  3. alone in an empty root (unshare -r chroot), it runs `version` and
#     `validate` on a topology copied there;
#  4. there, with no /etc/nsswitch.conf and no library, it resolves a host name
#     from /etc/hosts and verifies TLS: an add-on URL on a loopback HTTPS server
#     is downloaded when SSL_CERT_FILE names the server's CA, and refused as
#     untrusted (not a crash) when it does not.
# Settings: TALOSPROV_DIST_PROFILE (default dist-check, see Cargo.toml),
# TALOSPROV_DIST_WORK (default target/dist-check), TALOSPROV_DIST_REUSE=1 (check
# the archives the last run built instead of building them again, when working
# on the checks). Prints `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
export TALOSPROV_DIST_PROFILE=${TALOSPROV_DIST_PROFILE:-dist-check}
work=${TALOSPROV_DIST_WORK:-target/dist-check}
mkdir -p "$work"
work=$(cd "$work" && pwd)
target=x86_64-unknown-linux-musl
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

# Both builds see the same commit facts: the copy has no .git.
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
export TALOSPROV_GIT_COMMIT
TALOSPROV_GIT_COMMIT=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  TALOSPROV_GIT_COMMIT="$TALOSPROV_GIT_COMMIT-modified"   # as scripts/dist.sh says
fi

# 1. Two builds, two paths, two build folders.
copy="$work/elsewhere/talosprov-copy"
[ "${TALOSPROV_DIST_REUSE:-0}" = 1 ] || rm -rf "$work/elsewhere"
mkdir -p "$copy"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -C "$copy" -xf -

build_ok() { [ "${TALOSPROV_DIST_REUSE:-0}" = 1 ] && [ -f "$1/SHA256SUMS" ]; }
echo "== build 1: $repo"
if build_ok "$work/dist-a" || CARGO_TARGET_DIR="$work/build-a" TALOSPROV_DIST_DIR="$work/dist-a" \
  scripts/dist.sh "$target" > "$work/build-a.log" 2>&1; then
  ok "dist.sh built the archive in $repo"
else
  bad "dist.sh failed in $repo (see $work/build-a.log):"
  tail -n 20 "$work/build-a.log"
  finish
fi
echo "== build 2: $copy"
if build_ok "$copy/target/dist" || (cd "$copy" && CARGO_TARGET_DIR="$copy/target" TALOSPROV_DIST_DIR="$copy/target/dist" \
  scripts/dist.sh "$target") > "$work/build-b.log" 2>&1; then
  ok "dist.sh built the archive in $copy"
else
  bad "dist.sh failed in $copy (see $work/build-b.log):"
  tail -n 20 "$work/build-b.log"
  finish
fi

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
archive="talosprov-$version-$target.tar.gz"
if [ -f "$work/dist-a/$archive" ] && [ -f "$work/dist-a/SHA256SUMS" ]; then
  ok "target/dist holds $archive and SHA256SUMS"
else
  bad "no $archive or SHA256SUMS in $work/dist-a"
  finish
fi
if (cd "$work/dist-a" && sha256sum -c --quiet SHA256SUMS); then
  ok "SHA256SUMS checks the archive"
else
  bad "SHA256SUMS does not check the archive"
fi
a=$(sha256sum < "$work/dist-a/$archive" | cut -d' ' -f1)
b=$(sha256sum < "$copy/target/dist/$archive" | cut -d' ' -f1)
echo "   sha256 $a ($repo)"
echo "   sha256 $b ($copy)"
if [ "$a" = "$b" ]; then
  ok "the two builds give the same archive"
else
  bad "the two builds differ"
  if command -v diffoscope >/dev/null; then diffoscope "$work/dist-a/$archive" "$copy/target/dist/$archive" | head -n 40; fi
fi
listing=$(tar -tvzf "$work/dist-a/$archive")
echo "$listing" | sed 's/^/   /'
expected=$(printf '%s\n' "talosprov-$version-$target/" "talosprov-$version-$target/LICENSE" \
  "talosprov-$version-$target/README.md" "talosprov-$version-$target/talosprov")
if [ "$(tar -tzf "$work/dist-a/$archive")" = "$expected" ]; then
  ok "the archive holds the binary, README.md and LICENSE, sorted"
else
  bad "the archive's entries are not the expected ones"
fi
if echo "$listing" | awk '{print $2}' | grep -qv '^0/0$'; then
  bad "an entry is not owned by 0/0"
else
  ok "every entry is owned by 0/0"
fi
if grep -aq -e "$repo/" -e "$work/" -e "${CARGO_HOME:-$HOME/.cargo}/" "$work/build-a/$target/$TALOSPROV_DIST_PROFILE/talosprov"; then
  bad "the binary holds an absolute path of the build"
else
  ok "the binary holds no absolute path of the build (checkout, build folder, cargo home)"
fi

# 2. Static.
rm -rf "$work/unpacked"
mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xzf "$work/dist-a/$archive"
bin="$work/unpacked/talosprov-$version-$target/talosprov"
kind=$(file -b "$bin")
echo "   file: $kind"
case "$kind" in
  *"statically linked"* | *"static-pie linked"*) ok "file says the binary is statically linked" ;;
  *) bad "file does not say statically linked" ;;
esac
if readelf -lW "$bin" | grep -q 'INTERP' || readelf -dW "$bin" | grep -q '(NEEDED)'; then
  bad "the binary has an ELF interpreter or a NEEDED library"
else
  ok "no ELF interpreter and no NEEDED library"
fi

# 3. An empty root: the binary, a topology, nothing else.
root="$work/root"
rm -rf "$root"
mkdir -p "$root/lab"
cp "$bin" "$root/talosprov"
cp -r examples/lab/addons "$root/lab/"
cp -r patches "$root/patches"
sed -e 's#^patches_dir: .*#patches_dir: ../patches#' -e '/ca_file:/d' \
  examples/lab/cluster.yaml > "$root/lab/cluster.yaml"
unshare=$(command -v unshare)
chroot=$(command -v chroot)
# validate needs the Proxmox endpoint (it does not connect to it).
in_root() { env -i PROXMOX_VE_ENDPOINT=https://pve.example:8006 "$unshare" -r "$chroot" "$root" /talosprov "$@"; }
out=$(in_root version 2>&1)
echo "$out" | sed 's/^/   /'
if echo "$out" | grep -q "^talosprov $version$" && echo "$out" | grep -q "^target: $target$" \
  && echo "$out" | grep -q "^commit: $TALOSPROV_GIT_COMMIT$"; then
  ok "version runs in an empty root and names the version, commit and target"
else
  bad "version in an empty root"
fi
json=$(in_root version --json 2>&1)
if echo "$json" | python3 -c '
import json, sys
v = json.load(sys.stdin)
assert set(v) >= {"version", "commit", "target", "rustc"}, v
assert v["target"] == sys.argv[1] and v["version"] == sys.argv[2], v
' "$target" "$version"; then
  ok "version --json is one object with version, commit, target and rustc"
else
  bad "version --json: $json"
fi
if out=$(in_root validate -f /lab/cluster.yaml 2>&1); then
  ok "validate passes on the lab topology in an empty root"
else
  bad "validate in an empty root: $out"
fi
printf 'cluster:\n  name: lab\n  talos_version: 1.13\n' > "$root/lab/bad.yaml"
if out=$(in_root validate -f /lab/bad.yaml 2>&1); then
  bad "validate accepted a broken topology in an empty root"
elif echo "$out" | grep -q "bad.yaml"; then
  ok "validate refuses a broken topology in an empty root, naming the file"
else
  bad "validate's error in an empty root names no file: $out"
fi

# 4. Name resolution and TLS with no nsswitch.conf and no library: /etc/hosts
#    names the loopback server, SSL_CERT_FILE its CA. A bootstrap add-on's
#    manifest is downloaded by `render` and lands in the control plane's
#    inline manifests.
tls="$work/tls"
rm -rf "$tls"
mkdir -p "$tls/www" "$root/etc"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=talosprov dist check CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=addons.test" \
  -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:addons.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$tls/server.ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
  -days 2 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
cat > "$tls/www/extra.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: dist-check
  namespace: kube-system
data:
  from: a loopback HTTPS server
YAML
sum=$(sha256sum < "$tls/www/extra.yaml" | cut -d' ' -f1)
cp "$tls/ca.pem" "$root/ca.pem"
cp tests/fixtures/secrets.yaml "$root/secrets.yaml"
printf '127.0.0.1 addons.test\n' > "$root/etc/hosts"
python3 - "$tls" > "$tls/port" 2> "$tls/server.log" <<'PY' &
import http.server, ssl, sys, functools
d = sys.argv[1]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=d + "/www")
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(d + "/server.pem", d + "/server.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.timeout = 1
import time
deadline = time.time() + 300
while time.time() < deadline:
    srv.handle_request()
PY
server=$!
for _ in $(seq 100); do [ -s "$tls/port" ] && break; sleep 0.1; done
port=$(cat "$tls/port")
cp "$root/lab/cluster.yaml" "$root/lab/tls.yaml"
cat >> "$root/lab/tls.yaml" <<YAML
  dist-check:
    url: https://addons.test:$port/extra.yaml
    sha256: $sum
    namespace: kube-system
    phase: bootstrap
YAML
render=(render talos-controlplane-01 --secrets /secrets.yaml -f /lab/tls.yaml)
if out=$(env -i PROXMOX_VE_ENDPOINT=https://pve.example:8006 SSL_CERT_FILE=/ca.pem \
  "$unshare" -r "$chroot" "$root" /talosprov "${render[@]}" 2>&1) \
  && echo "$out" | grep -q "from: a loopback HTTPS server"; then
  ok "render downloads an add-on from https://addons.test:$port (/etc/hosts, SSL_CERT_FILE) in an empty root"
else
  bad "the HTTPS add-on in an empty root: $out"
fi
if out=$(in_root "${render[@]}" 2>&1); then
  bad "an HTTPS server whose CA is not trusted was accepted"
elif echo "$out" | grep -q "https://addons.test:$port/extra.yaml" && echo "$out" | grep -qi "certificate"; then
  ok "without SSL_CERT_FILE the server's certificate is refused (Mozilla's roots only), naming the URL"
  echo "$out" | head -n 2 | sed 's/^/   /'
else
  bad "an untrusted server's refusal does not say why: $out"
fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

finish
