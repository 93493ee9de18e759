#!/usr/bin/env bash
# Installs the Debian packages fleetgate's lab, images and tests need. Idempotent: it calls
# apt-get only when something is missing, so warm machines pay nothing.
set -euo pipefail

PACKAGES=(
  podman runc catatonit containernetworking-plugins iptables  # lab container hosts
  qemu-system-x86 e2fsprogs                                    # lab VM hosts
  qemu-utils                                                   # qemu-img: Packer's qemu source
  mmdebstrap                                                   # base root filesystems
  packer                                                       # golden images
  openssh-client util-linux                                    # ssh to hosts, nsenter for faults
  python3 python3-venv git make                                # the controller itself
  chromium                                                     # renders rollout reports in tests
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
