"""The project's own drivers of the FeS trainer and aggregator: in-process and mpirun."""
