"""The lines of FedML 0.9.6's cross-device server that assume MNN or fail here, and what
stands in for each while a FeS server runs (scoped: `installed()` restores FedML after).

FedML's server runtime is used as it is: `ServerMNN` -> `server_mnn_api.init_server` ->
`FedMLServerManager` over `MqttS3MNNCommManager` (topics, status handshake, round counting,
S3 uploads and downloads, client and data-silo selection). What cannot run for a FeS model:

1. `cross_device/server_mnn/fedml_aggregator.py:63-88` (`FedMLAggregator.aggregate`) opens
   every device's file as an MNN model (:77 `read_mnn_as_tensor_dict`, `utils.py:11-29`:
   `MNN.expr.load_as_dict`, parameters by position) and tests each one with MNN first (:68).
   A FeS update is not an MNN model (a transformer's trainable subset with the FeS answer,
   `protocol.py`), so `FesDeviceAggregator.aggregate` reads the safetensors file instead and
   hands the list to FeS's aggregator through FedML's own hooks (on_before_aggregation,
   aggregate, on_after_aggregation), as FedML's cross-silo aggregator does.
2. `fedml_aggregator.py:222-272` (`test_on_server_for_all_clients_mnn`) runs the MNN model on
   an MNN image loader with a 10-class one-hot (:250). FeS evaluates inside `aggregate` (its
   test set, its metrics row); the override reports those scores.
3. `cross_device/server_mnn/fedml_server_manager.py:311` writes the aggregate back into the
   MNN file (`write_tensor_dict_to_mnn`, imported by name at :9, `utils.py:31-51`): replaced
   by writing FeS's next message (global tensors + plan) as that file.
4. `core/distributed/communication/s3/remote_storage.py:395-421` (`upload_file`, which
   `S3MNNStorage.upload_model_file` calls) passes `ExtraArgs={"Metadata": None}`; boto3
   rejects it ("Parameter validation failed"), the error is only logged and the server
   announces a key that was never uploaded. The stand-in uploads with empty metadata and
   ends the run in one line if the upload fails.

Not shimmed: `server_mnn/utils.py:4` and `fedml_aggregator.py:6` import MNN at module level,
so FedML's cross-device server needs the `MNN` package installed (PyPI `MNN`) even though
no MNN code runs for FeS.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()
from fedml.core.distributed.communication.s3.remote_storage_mnn import S3MNNStorage
from fedml.cross_device.server_mnn import fedml_server_manager, server_mnn_api
from fedml.cross_device.server_mnn.fedml_aggregator import FedMLAggregator

from fedml_fes.errors import one_line
from fedml_fes_plugins.cross_device.protocol import decode_payload, encode_payload

Fail = Callable[[str], NoReturn]


class FesDeviceAggregator(FedMLAggregator):
    """FedML's cross-device aggregator (`server_mnn_api.py:25` builds it around the user's
    `ServerAggregator`) with its two MNN methods replaced; the rest (upload flags, the wait
    for every device, client and data-silo selection) is FedML's. It also notes when each
    phase started and how many closed, for the server's watchdog."""

    fail: Fail | None = None  # set by installed(): how a failure ends the server
    on_created: Callable[["FesDeviceAggregator"], None] | None = None  # the server's watchdog looks in

    def __init__(self, test_dataloader, worker_num, device, args, aggregator):
        super().__init__(test_dataloader, worker_num, device, args, aggregator)
        self.phase_started = time.monotonic()
        self.phases_closed = 0
        self.bytes_received = 0
        if self.on_created is not None:
            self.on_created(self)

    def _load(self, idx: int) -> Any:
        path = self.model_dict.get(idx)
        if not path or not Path(str(path)).is_file():
            raise ValueError(f"device slot {idx}: its update file was not downloaded ({path})")
        data = Path(path).read_bytes()
        self.bytes_received += len(data)
        try:
            return decode_payload(data)
        except Exception as e:
            raise ValueError(f"device slot {idx}: its update is not a FeS payload ({one_line(e)})") from None

    def aggregate(self):  # replaces fedml_aggregator.py:63-88
        try:
            raw = [(self.sample_num_dict[idx], self._load(idx)) for idx in range(self.worker_num)]
        except ValueError as e:
            self.fail(f"round {self.args.round_idx}: {e}")
        raw, _ = self.aggregator.on_before_aggregation(raw)
        message = self.aggregator.aggregate(raw)  # FeS closes the phase: FedAvg, evaluation, next plan
        message = self.aggregator.on_after_aggregation(message)
        self.phases_closed += 1
        self.phase_started = time.monotonic()
        return message

    def test_on_server_for_all_clients_mnn(self, mnn_file_path, round_idx, report_metrics=True):
        # replaces fedml_aggregator.py:222-272: FeS evaluated the round in `aggregate`
        logging.info("round %s scores: %s", round_idx, self.aggregator.test(self.test_global, self.device, self.args))


def write_message_file(path: str, message: Any) -> None:
    """Stands in for `write_tensor_dict_to_mnn` at fedml_server_manager.py:311."""
    Path(path).write_bytes(encode_payload(message))


def _upload_model_file(fail: Fail) -> Callable[..., str]:
    def upload_model_file(self: S3MNNStorage, message_key: str, model_file_path: str) -> str:
        # remote_storage.py:405 with metadata={} instead of None
        url = self.s3_storage.upload_file(model_file_path, message_key, metadata={})
        if not url:
            fail(f"uploading the global model to the bucket failed (key {message_key}); see the server log")
        return url

    return upload_model_file


@contextlib.contextmanager
def installed(fail: Fail, on_created: Callable[[FesDeviceAggregator], None] | None = None) -> Iterator[None]:
    """FedML's cross-device server with the four stand-ins above, restored on exit.
    `on_created` gets FedML's aggregator when `init_server` builds it."""
    swaps = [
        (server_mnn_api, "FedMLAggregator", FesDeviceAggregator),
        (fedml_server_manager, "write_tensor_dict_to_mnn", write_message_file),
        (S3MNNStorage, "upload_model_file", _upload_model_file(fail)),
    ]
    old = [(owner, name, getattr(owner, name)) for owner, name, _ in swaps]
    FesDeviceAggregator.fail = staticmethod(fail)
    FesDeviceAggregator.on_created = staticmethod(on_created) if on_created else None
    try:
        for owner, name, value in swaps:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in old:
            setattr(owner, name, value)
        FesDeviceAggregator.fail = FesDeviceAggregator.on_created = None
