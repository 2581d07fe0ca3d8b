"""Test-only fault injection for the processes a test starts (mpirun ranks, cross-silo silos,
FedMLRunner scripts); the product has no fault switch. A test sets

    PYTHONPATH=tests/faults   FES_TEST_FAULTS='{"raise_in_round": 1}'

and Python imports this file at start-up (site's `sitecustomize` hook). Faults:
- raise_in_round / raise_on_client (-1: any): a client's local task raises, as a device
  whose training crashes;
- stall_in_round / stall_on_rank / stall_s: a cross-silo silo stops answering from that round
  on, as a device that hangs (tests kill it while it stalls).
"""

import json
import os

_SPEC = os.environ.get("FES_TEST_FAULTS")
if _SPEC:
    from tests_faults_install import install  # noqa: E402 (next to this file)

    install(json.loads(_SPEC))
