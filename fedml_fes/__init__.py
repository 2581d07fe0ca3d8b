"""fedml-fes core: federated few-shot NLP (FeS) in pure torch/transformers.

Nothing in this package imports FedML; the FedML adapters live in `fedml_fes_plugins`.
"""

__version__ = "0.1.0"
