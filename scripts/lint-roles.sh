#!/usr/bin/env bash
# Static checks of the Ansible content, run by `make lint` (and so by `make test` and CI):
# ansible-lint's production profile, and every role has its Molecule scenario and README.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VENV_BIN:-.venv/bin}

missing=0
for role in roles/*/; do
  name=$(basename "$role")
  [[ -d $role/tasks ]] || continue
  if [[ ! -f molecule/$name/molecule.yml ]]; then
    echo "lint-roles: roles/$name: no Molecule scenario (molecule/$name/molecule.yml)" >&2
    missing=1
  fi
  if [[ ! -f $role/README.md ]]; then
    echo "lint-roles: roles/$name: no README.md" >&2
    missing=1
  fi
done

PATH="$PWD/$bin:$PATH" NO_COLOR=1 "$bin/ansible-lint" --profile production --offline -q \
  roles playbooks
exit "$missing"
