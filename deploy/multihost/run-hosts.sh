#!/usr/bin/env bash
# The hero run on several hosts without a cluster manager: run this on every host, same checkout, same config,
# the checkpoint directory on shared storage. Process 0's host must be reachable on the coordinator port.
#
#   deploy/multihost/run-hosts.sh COORDINATOR_HOST:PORT NUM_HOSTS THIS_HOST_INDEX [extra `training run` args...]
#   e.g. on host A:  deploy/multihost/run-hosts.sh hostA:4545 2 0 --set mesh.expert=4
#        on host B:  deploy/multihost/run-hosts.sh hostA:4545 2 1 --set mesh.expert=4
#
# Locally, 2 processes × 2 CPU devices (what tests/training run):
#   XLA_FLAGS=--xla_force_host_platform_device_count=2 deploy/multihost/run-hosts.sh 127.0.0.1:4545 2 0 --steps 20 &
#   XLA_FLAGS=--xla_force_host_platform_device_count=2 deploy/multihost/run-hosts.sh 127.0.0.1:4545 2 1 --steps 20
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
coordinator=$1 hosts=$2 index=$3
shift 3
export OBS_COORDINATOR="$coordinator" OBS_NUM_PROCESSES="$hosts" OBS_PROCESS_ID="$index"
exec "${PYTHON:-.venv/bin/python}" -m training run --config "${OBS_CONFIG:-training/configs/demo.toml}" \
  --run-id "${OBS_RUN_ID:-hero}" "$@"
