"""FeS on FedML 0.9.6's cross-device ("Beehive") server runtime, with emulated devices.

The server is FedML's own `ServerMNN` (its `FedMLServerManager` over the `MQTT_S3_MNN`
backend) driving the one FeS aggregator (`FesAggregator`); the devices are Python processes
that speak the protocol FedML's Android SDK speaks to that server (MQTT topics and JSON
messages, model files in an S3 bucket) and train with the one FeS trainer (`FesTrainer`).
`protocol.py` documents the protocol with FedML's file:line, `shims.py` the few lines of
FedML that assume MNN and what replaces them.
"""
