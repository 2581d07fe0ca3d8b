"""Cost emulation: how long, how much traffic, energy and memory a run would cost on a device.

Clients record what they computed (FLOPs of the encoder calls they actually made, bytes
they moved, memory they held) into `<run_dir>/client_costs.csv`; a device profile and a
network turn those records into emulated time and energy afterwards, so any profile and
bandwidth can be applied to a finished run. See docs/BENCHMARK.md for the formulas.
"""
