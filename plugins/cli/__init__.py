"""The `fedml-fes` command line."""
