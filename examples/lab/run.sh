#!/usr/bin/env bash
# The main job on loopback: starts fakepve (Proxmox), a factory stand-in and the
# Talos simulator, then runs `talosprov validate`, `plan`, `apply -auto-approve`,
# `output kubeconfig`, `kubectl get nodes` (every node Ready: the CNI add-on was
# applied at bootstrap; the GPU node with nvidia.com/gpu), a second plan and
# `destroy`, and stops them all. Nothing reaches beyond 127.0.0.0/8.
#   examples/lab/run.sh            # from the repository root or anywhere
#   examples/lab/run.sh --keep     # skip the destroy and keep the lab up for day two
#                                  # (prints the environment to use; Ctrl-C stops it)
# Each run starts from nothing (fakepve and the simulator keep no state), so the
# previous run's examples/lab/talosprov.tfstate is removed first.
set -euo pipefail
keep=0
case "${1:-}" in
  --keep) keep=1 ;;
  "") ;;
  *) echo "usage: $0 [--keep]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
lab=examples/lab
run=$lab/.run
pve_host=127.0.0.110
factory=127.0.0.1:18080
nodes=(127.0.0.121 127.0.0.122 127.0.0.123)
# Spare simulated nodes for day two: a pool's members (ip_range 127.0.0.130-127.0.0.133)
# or added nodes find a Talos node waiting in maintenance mode there.
spare=(127.0.0.130 127.0.0.131 127.0.0.132 127.0.0.133)
token_id='root@pam!talosprov'
token_secret='5d2a2b7e-6c1f-4a39-9d0e-3f6c2a1b8e70'

echo "== building talosprov, the simulator and the factory stand-in (the first build takes several minutes)"
cargo build -p talosprov -p talosprov-sim --bin talosprov --bin talos-sim --bin factory-stub
bin="${CARGO_TARGET_DIR:-target}/debug"   # where cargo build put them

venv=target/venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import fakepve' 2>/dev/null; then
  echo "== installing fakepve 0.5.0 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'fakepve==0.5.0'
fi

rm -rf "$run" "$lab"/talosprov.tfstate*
mkdir -p "$run"
pids=()
cleanup() {
  exec 3>&- 2>/dev/null || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "== certificates for fakepve ($pve_host)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=talosprov lab CA" -keyout "$run/ca.key" -out "$run/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=fakepve" -keyout "$run/server.key" -out "$run/server.csr" 2>/dev/null
printf 'subjectAltName=IP:%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$pve_host" > "$run/server.ext"
openssl x509 -req -in "$run/server.csr" -CA "$run/ca.pem" -CAkey "$run/ca.key" -CAcreateserial \
  -days 2 -extfile "$run/server.ext" -out "$run/server.pem" 2>/dev/null

echo "== starting fakepve"
# The datastores' content types and capacity (10 TiB on local-lvm, room for every VM and
# pool the README's examples make), as the tests' fakepve has them.
storages=$(tr -d '\n' < "$lab/fakepve-storages.json")
config=$(printf '{"host":"%s","port":0,"cert":"%s","key":"%s","password":"lab","tokens":{"%s":"%s"},"grants":[],"nodes":["pve1"],"storages":%s,"time_scale":0,"fetch_downloads":true}' \
  "$pve_host" "$PWD/$run/server.pem" "$PWD/$run/server.key" "$token_id" "$token_secret" "$storages")
mkfifo "$run/fakepve.in"
"$venv/bin/python" tests/it/support/fakepve_launch.py "$config" < "$run/fakepve.in" > "$run/fakepve.out" 2> "$run/fakepve.log" &
pids+=($!)
exec 3> "$run/fakepve.in"   # the launcher runs until its stdin closes
for _ in $(seq 300); do [ -s "$run/fakepve.out" ] && break; sleep 0.1; done
url=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' "$run/fakepve.out" | head -n 1)
[ -n "$url" ] || { echo "fakepve did not start; see $run/fakepve.log" >&2; exit 1; }
echo "   $url"

echo "== starting the Image Factory stand-in on $factory"
"$bin/factory-stub" --listen "$factory" > "$run/factory.out" 2> "$run/factory.log" &
pids+=($!)

echo "== starting the Talos simulator on ${nodes[*]} (port 50000)"
sim_args=()
for ip in "${nodes[@]}" "${spare[@]}"; do sim_args+=(--node "$ip"); done
# Talos's nocloud platform names each node after its Proxmox VM (the topology's
# hostname), which the simulator cannot see: it is told.
sim_args+=(--hostname 127.0.0.121=talos-controlplane-01 --hostname 127.0.0.122=talos-worker-01 --hostname 127.0.0.123=talos-gpu-01)
# The spare nodes carry the names the README's pool example gives its members.
for i in 1 2 3 4; do sim_args+=(--hostname "${spare[$((i - 1))]}=lab-workers-$i"); done
# talos-gpu-01 has the lab's GPU passed through (pci_mappings.gpu, 10de:2507).
sim_args+=(--gpu-node 127.0.0.123)
# A node reset without reboot halts; it is powered on again 2 s later, as when
# its VM is started again or a new VM takes its address.
"$bin/talos-sim" "${sim_args[@]}" --reboot-delay 1 --power-on-after 2 2> "$run/talos-sim.log" &
pids+=($!)
for _ in $(seq 300); do [ -s "$run/factory.out" ] && grep -q "127.0.0.133:50000" "$run/talos-sim.log" && break; sleep 0.1; done

export PROXMOX_VE_ENDPOINT="$url"
export PROXMOX_VE_API_TOKEN="$token_id=$token_secret"
tp() { echo "\$ talosprov $*"; "$bin/talosprov" "$@"; }

tp validate -f "$lab/cluster.yaml"
tp plan -f "$lab/cluster.yaml"
tp apply -f "$lab/cluster.yaml" -auto-approve
tp output kubeconfig -f "$lab/cluster.yaml" --out-file "$run/kubeconfig"
tp output talosconfig -f "$lab/cluster.yaml" --out-file "$run/talosconfig"
echo "== kubeconfig in $run/kubeconfig, talosconfig in $run/talosconfig (mode 0600)"
if ! command -v kubectl >/dev/null; then
  echo "kubectl is not installed: see https://kubernetes.io/docs/tasks/tools/ (or your distribution's kubernetes-client package)" >&2
  exit 1
fi
echo "\$ kubectl --kubeconfig $run/kubeconfig get nodes"
kubectl --kubeconfig "$run/kubeconfig" get nodes
echo "\$ kubectl --kubeconfig $run/kubeconfig get nodes -o custom-columns=NAME:.metadata.name,IP:.status.addresses[0].address,GPU:.status.allocatable.nvidia\\.com/gpu"
kubectl --kubeconfig "$run/kubeconfig" get nodes \
  -o 'custom-columns=NAME:.metadata.name,IP:.status.addresses[0].address,GPU:.status.allocatable.nvidia\.com/gpu'
tp plan -f "$lab/cluster.yaml" -detailed-exitcode
if [ "$keep" = 1 ]; then
  cat <<EOF
== the lab stays up (--keep). In another terminal, from $PWD:
   export PROXMOX_VE_ENDPOINT='$url'
   export PROXMOX_VE_API_TOKEN='$token_id=$token_secret'
   $bin/talosprov plan -f $lab/cluster.yaml     # then apply, health, output, destroy
   Edit $lab/cluster.yaml (talos_version, kubernetes_version, memory, nodes) to try
   day two. Logs: $run/. Press Ctrl-C here to stop the lab.
EOF
  wait
else
  tp destroy -f "$lab/cluster.yaml" -auto-approve
fi
