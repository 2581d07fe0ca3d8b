#!/bin/sh
# Launch a FeS run under mpirun, FedNLP-style:
#   sh mpi/run_fes_mpi.sh 3 run_configs/demo_bbc_fedcls.yaml [--set section.key=value ...]
# Rank 0 is the server, ranks 1..N-1 play the clients. Uses mpi/mpi_host_file.
# POSIX sh (dash, bash, busybox ash): no pipefail, arrays or [[ ]].
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 NUM_PROCESSES CONFIG.yaml [--set section.key=value ...]" >&2
  exit 2
fi
NP=$1; CF=$2; shift 2
case $NP in
  ''|*[!0-9]*)
    echo "$0: NUM_PROCESSES must be a number (1 server + N-1 clients), got '$NP'" >&2
    exit 2 ;;
esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
FES="$ROOT/.venv/bin/fedml-fes"
[ -x "$FES" ] || FES=fedml-fes
exec "$FES" mpirun -np "$NP" --cf "$CF" --hostfile "$HERE/mpi_host_file" "$@"
