"""Cross-silo deployment: one server and K silos over FedML's gRPC or MQTT_S3 transports."""
