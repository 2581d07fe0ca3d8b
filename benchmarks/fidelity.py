"""The fidelity benchmark: FedCLS, Prompt-only, Pseudo-only, FedFSL and FeS on three datasets, one config.

    .venv/bin/python benchmarks/fidelity.py --agnews-dir /path/to/agnews --jobs 2   # 45 runs, resumable
    .venv/bin/python benchmarks/fidelity.py --datasets bbc_news --seeds 0 --methods fedcls \\
        --out /tmp/fid_smoke --set train_args.comm_round=1                           # a quick look
    .venv/bin/python benchmarks/fidelity.py --report-only                           # CSV + report only

AG News (official CSV layout, --agnews-dir), BBC News and TREC-6, seeds 0 1 2, every run from
run_configs/fidelity.yaml with only the method, the seed, the data keys and the dataset's PVP
pattern id changed. Writes benchmarks/results/fidelity.csv and fidelity.md (--results) from the
run folders in runs/fidelity (--out). The same as `fedml-fes bench --suite fidelity`; the logic
is in plugins/bench/fidelity.py (the command line) and the fidelity_*.py modules beside it.
"""

from __future__ import annotations

import argparse
import sys

from fedml_fes.errors import FesError
from fedml_fes_plugins.adapters.hard_exit import leave_stopped
from fedml_fes_plugins.bench.fidelity import add_arguments, run_command


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[2:]),
    )
    add_arguments(p, standalone=True)
    opts = p.parse_args(argv)
    try:
        return run_command(opts, ".venv/bin/python benchmarks/fidelity.py")
    except FesError as e:
        print(f"fidelity: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    code = main()
    if code >= 128:  # stopped: end without the interpreter's teardown (hard_exit.leave_stopped)
        leave_stopped(code)
    sys.exit(code)
