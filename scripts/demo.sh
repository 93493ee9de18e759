#!/usr/bin/env bash
# The lab demo: bring up a real local fleet, validate every node class, reach every host
# through ansible-runner, print what each host runs, and take the fleet down again.
set -euo pipefail
cd "$(dirname "$0")/.."
FG=.venv/bin/fleetgate
export FLEETGATE_LAB_DIR=${FLEETGATE_LAB_DIR:-$PWD/.fleetgate/demo-lab}
CONTAINERS=${DEMO_CONTAINERS:-4}
VMS=${DEMO_VMS:-1}

cleanup() { "$FG" lab down >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "== validate node classes (schema + compatibility matrix)"
"$FG" spec validate
echo "== lab up: $CONTAINERS container host(s), $VMS VM host(s)"
"$FG" lab down >/dev/null 2>&1 || true
"$FG" lab up --containers "$CONTAINERS" --vms "$VMS"
inventory=$("$FG" lab inventory)
echo "== ping every host through ansible-runner"
"$FG" fleet ping -i "$inventory"
echo "== what every host runs"
"$FG" fleet facts -i "$inventory"
echo "== lab down"
"$FG" lab down
trap - EXIT
