"""Entry point of the FeS packages for FedML MLOps (Octopus).

The agent starts it as
    python fes_mlops_entry.py --cf config/fedml_config.yaml --rank N --role server|client
after `config/bootstrap.sh` installed fedml-fes from the wheel shipped in `wheels/`.
Everything happens in fedml_fes_plugins.cross_silo.mlops (see its docstring).
"""

import sys

from fedml_fes_plugins.cross_silo.mlops import main

if __name__ == "__main__":
    sys.exit(main())
