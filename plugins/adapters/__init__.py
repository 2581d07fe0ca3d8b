"""FedML's objects as the runtimes drive them: the ClientTrainer and ServerAggregator over the
FeS core, the data loader, and the guards that keep FedML offline. A FedML user's own
FedMLRunner script imports `fedml_fes_plugins.fedml_plugin` instead."""
