#!/usr/bin/env bash
# The lab demo: two real rollouts from examples/, each on its own local lab fleet, at once.
#   1. kernel security update on lab VMs, 6.1.0-55 -> 6.1.0-57: canary, then the rest; every
#      host reboots into the new kernel and passes the smoke gates; the rollout completes.
#   2. a bad golden image on lab containers, rolled out by re-imaging: the fleet runs Packer's
#      image of lab-cpu version 1, and the change is the image of version 2, which swaps
#      OpenBLAS for the reference BLAS. Nothing fails functionally, GEMM collapses, the canary
#      analysis fails it against hosts still on version 1, the rollout halts by itself, the
#      canary is re-imaged back to version 1 and re-verified, and the later waves are never
#      touched.
# Images are built once and kept in $FLEETGATE_STATE_DIR/images, so a second run (a warm
# machine) starts from them; DEMO_REBUILD=1 builds them again.
# It prints a summary and the paths of both HTML reports. Exit 0 when both rollouts ended as
# described (completed, halted), 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
FG=$PWD/.venv/bin/fleetgate
export FLEETGATE_STATE_DIR=${FLEETGATE_STATE_DIR:-$PWD/.fleetgate/demo}
VM_LAB=$FLEETGATE_STATE_DIR/vm-lab
CT_LAB=$FLEETGATE_STATE_DIR/ct-lab
OUT=$FLEETGATE_STATE_DIR/out
IMAGES=$FLEETGATE_STATE_DIR/images
VMS=${DEMO_VMS:-2}
CONTAINERS=${DEMO_CONTAINERS:-5}
STAMP=$(date -u +%Y%m%d-%H%M%S)
KERNEL_ID=demo-kernel-$STAMP
BLAS_ID=demo-bad-blas-$STAMP
mkdir -p "$OUT"

# Build CLASS's image unless this state dir already holds that version (see above).
# $2: another class directory (a later version of the class, as an example carries it).
image() {
  local classes=${2:-inventory/classes} version
  version=$("$PWD/.venv/bin/python" -c 'import sys; from fleetgate.spec.loader import load_class
from pathlib import Path; print(load_class(Path(sys.argv[1])).version)' "$classes/$1.yml")
  if [[ -z ${DEMO_REBUILD:-} && -f $IMAGES/$1-$version/manifest.json ]]; then
    echo "image $1:$version already built ($IMAGES/$1-$version; DEMO_REBUILD=1 rebuilds)"
  else
    FLEETGATE_CLASSES_DIR=$PWD/$classes "$FG" image build "$1" --out "$IMAGES" --force
  fi
}

down() { FLEETGATE_LAB_DIR=$VM_LAB "$FG" lab down >/dev/null 2>&1 || true
         FLEETGATE_LAB_DIR=$CT_LAB "$FG" lab down >/dev/null 2>&1 || true; }
trap down EXIT
down

echo "== validate node classes (schema + compatibility matrix)"
"$FG" spec validate >/dev/null && echo "all classes valid"

kernel_rollout() {
  set -euo pipefail  # a background job inherits the caller's `set +e`
  export FLEETGATE_LAB_DIR=$VM_LAB
  # The golden image of lab-vm version 1 (kernel 55, vpoll built by DKMS for it, smoke probes,
  # the manifest), built by Packer in a container with the same roles that update live hosts.
  # Building it there is minutes faster than applying the class inside emulated VMs.
  image lab-vm
  "$FG" lab up --containers 0 --vms "$VMS" --image lab-vm --images-dir "$IMAGES"
  "$FG" rollout plan examples/kernel-update/rollout.yml -i "$VM_LAB/inventory.yml" \
    --out "$OUT/kernel.plan.json"
  "$FG" rollout start "$OUT/kernel.plan.json" --id "$KERNEL_ID" \
    --metrics-file "$OUT/kernel.prom"
}

blas_rollout() {
  set -euo pipefail
  export FLEETGATE_LAB_DIR=$CT_LAB FLEETGATE_IMAGES_DIR=$IMAGES
  # Version 1 is the fleet's image; version 2 (reference BLAS) is the change. Both are
  # Packer builds with the same roles apply-class runs on live hosts.
  image lab-cpu
  image lab-cpu examples/bad-blas/classes
  "$FG" lab up --containers "$CONTAINERS" --image lab-cpu:1
  "$FG" rollout plan examples/bad-blas/reimage.yml -i "$CT_LAB/inventory.yml" \
    --out "$OUT/bad-blas.plan.json"
  "$FG" rollout start "$OUT/bad-blas.plan.json" --id "$BLAS_ID" \
    --metrics-file "$OUT/bad-blas.prom"
}

echo "== two rollouts at once: kernel update on $VMS VM(s), lab-cpu image 2 on $CONTAINERS containers"
echo "   logs: $OUT/kernel.log, $OUT/bad-blas.log"
started=$SECONDS
set +e
kernel_rollout >"$OUT/kernel.log" 2>&1 &
kpid=$!
blas_rollout >"$OUT/bad-blas.log" 2>&1 &
bpid=$!
wait $bpid; brc=$?
echo "   bad-BLAS rollout ended (exit $brc) after $((SECONDS - started))s"
wait $kpid; krc=$?
echo "   kernel rollout ended (exit $krc) after $((SECONDS - started))s"
set -e

for id in "$KERNEL_ID" "$BLAS_ID"; do
  "$FG" rollout report "$id" --html "$OUT/$id.html" --md "$OUT/$id.md" >/dev/null 2>&1 || true
done

echo
echo "== kernel security update ($KERNEL_ID): expected completed"
"$FG" rollout status "$KERNEL_ID" 2>/dev/null || tail -20 "$OUT/kernel.log"
echo
echo "== bad golden image ($BLAS_ID): expected halted, canary re-imaged back to image 1"
"$FG" rollout status "$BLAS_ID" 2>/dev/null || tail -20 "$OUT/bad-blas.log"
"$FG" rollout explain "$BLAS_ID" --wave 1 2>/dev/null || true
echo
echo "reports:"
echo "  $OUT/$KERNEL_ID.html"
echo "  $OUT/$BLAS_ID.html"
echo "demo took $((SECONDS - started))s"
# 0 = completed for the kernel rollout; 10 = halted for the bad image, as intended.
[[ $krc -eq 0 && $brc -eq 10 ]]
