"""FedML adapters for fedml-fes: trainer/aggregator plugins, runtimes, launchers, CLI.

Everything that imports FedML lives here; the core (`fedml_fes`) stays FedML-free.
"""
