"""The protocol between FedML 0.9.6's cross-device server and a device, as the server speaks it.

FedML ships only the server side in Python; the device side lives in its Android SDK. Every
rule below is read off the server's code (paths under `fedml/`), so a Python device that
follows them is a device to that server:

Topics (`core/distributed/communication/mqtt_s3_mnn/mqtt_s3_comm_manager.py`):
- server -> device `fedml_<run_id>_<server_id>_<edge_id>` (send_message, :217; a device
  subscribes to it, :146); device -> server `fedml_<run_id>_<edge_id>` (the server
  subscribes one per edge id of `args.client_id_list`, :134-136).
- the run's settings: `flserver_agent/<edge_id>/start_train`, one JSON the server publishes
  at start outside MLOps (`cross_device/server_mnn/fedml_server_manager.py:58-155`); a
  device reads `run_config.parameters.train_args.comm_round` from it (:117).
- last wills: the server's connection leaves `{"ID": <server_id>, "status": "OFFLINE"}` on
  `flserver/last_will_msg` (:83-96, `mqtt/mqtt_manager.py:68-75`); a device leaves its own on
  `flclient/last_will_msg`.
- every publication is QoS 2 and retained (`mqtt_manager.py:113`, `retain_msg=True` by
  default); receivers drop retained copies (`mqtt_manager.py:185-186`), so a device must be
  subscribed before the server talks to it, or announce itself (ONLINE) when it connects.

Messages: JSON objects with `msg_type`, `sender`, `receiver` (integers: the server formats
the sender with %d, `core/distributed/fedml_comm_manager.py:39-41`) and the types of
`cross_device/server_mnn/message_define.py`:
- S2C_CHECK_CLIENT_STATUS (6), `client_idx`: sent to every edge once the server's
  connection is ready (`fedml_server_manager.py:248-277`); answer C2S_CLIENT_STATUS (5)
  with `client_status: "ONLINE"`. When every edge of the round is online the server sends
  S2C_INIT_CONFIG (1) to all (:201-221). It does not check whether it already did, so an
  edge that says ONLINE twice gets a second INIT_CONFIG: a device ignores it.
- S2C_INIT_CONFIG (1) and S2C_SYNC_MODEL_TO_CLIENT (2): `model_params` (an object key in the
  bucket), `model_params_url` (a presigned GET URL of that object), `model_params_key`,
  `client_idx`, `client_os` (:373-421). One object per round, shared by every edge (the
  server reuses the first upload's URL, :170-178, :332-346); the key is
  `fedml_<run_id>_<server_id>_<edge_id>_<uuid4>` (`mqtt_s3_comm_manager.py:227`).
- C2S_SEND_MODEL_TO_SERVER (3): `model_params` = the key of the device's upload, and
  `num_samples`. The server downloads that key to `<model_file_cache_folder>/<key>` and
  hands the local path on (`mqtt_s3_comm_manager.py:176-189`), so a key must be a plain file
  name. The round closes when every edge has answered (`server_mnn/fedml_aggregator.py:51-58`:
  no deadline, no partial rounds).
- after `comm_round` rounds the server keeps sending SYNC_MODEL (it never stops by itself,
  `fedml_server_manager.py:348-355`; `cleanup()`'s S2C_FINISH, :357-363, is never called):
  the device answers C2S_CLIENT_STATUS `"FINISHED"`, and when every edge has, the server
  ends (:223-239).

Model files: the Android SDK's are MNN models, which the server opens with MNN
(`server_mnn/utils.py:11-51`). A FeS model (a PyTorch transformer with a trainable subset)
has no MNN form here, so the object is FeS's message itself (the trainable tensors plus the
plan or the answers, `fedml_fes/runtime/payload.py`) as a safetensors file: tensors only,
no pickle, readable by any language; `shims.py` names the server lines this replaces.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from typing import Any

from fedml_fes_plugins.adapters.offline import import_fedml

import_fedml()
# the server's message types and keys, read from FedML itself (this module does not import MNN)
from fedml.cross_device.server_mnn.message_define import MyMessage

SERVER_LAST_WILL = "flserver/last_will_msg"  # CommunicationConstants.SERVER_TOP_LAST_WILL_MSG
CLIENT_LAST_WILL = "flclient/last_will_msg"  # CommunicationConstants.CLIENT_TOP_LAST_WILL_MSG
ONLINE, FINISHED, OFFLINE = "ONLINE", "FINISHED", "OFFLINE"
CLIENT_OS = "linux"  # MyMessage.MSG_CLIENT_OS_Linux: an emulated device says what it is


def server_to_device_topic(run_id: str, server_id: int, edge_id: int) -> str:
    return f"fedml_{run_id}_{server_id}_{edge_id}"


def device_to_server_topic(run_id: str, edge_id: int) -> str:
    return f"fedml_{run_id}_{edge_id}"


def start_train_topic(edge_id: int) -> str:
    return f"flserver_agent/{edge_id}/start_train"


def device_object_key(run_id: str, edge_id: int) -> str:
    """The key of a device's upload: like the server's own (`<topic>_<uuid4>`), one flat name."""
    return f"{device_to_server_topic(run_id, edge_id)}_{uuid.uuid4()}"


def message(msg_type: int, sender: int, receiver: int, **params: Any) -> str:
    return json.dumps(
        {
            MyMessage.MSG_ARG_KEY_TYPE: msg_type,
            MyMessage.MSG_ARG_KEY_SENDER: sender,
            MyMessage.MSG_ARG_KEY_RECEIVER: receiver,
            **params,
        }
    )


def status_message(edge_id: int, server_id: int, status: str) -> str:
    return message(
        MyMessage.MSG_TYPE_C2S_CLIENT_STATUS,
        edge_id,
        server_id,
        **{MyMessage.MSG_ARG_KEY_CLIENT_STATUS: status, MyMessage.MSG_ARG_KEY_CLIENT_OS: CLIENT_OS},
    )


def model_message(edge_id: int, server_id: int, key: str, num_samples: int) -> str:
    return message(
        MyMessage.MSG_TYPE_C2S_SEND_MODEL_TO_SERVER,
        edge_id,
        server_id,
        **{MyMessage.MSG_ARG_KEY_MODEL_PARAMS: key, MyMessage.MSG_ARG_KEY_NUM_SAMPLES: num_samples},
    )


def comm_round_of(start_train: dict[str, Any]) -> int | None:
    """`comm_round` from the server's start_train JSON (fedml_server_manager.py:112-123)."""
    try:
        return int(start_train["run_config"]["parameters"]["train_args"]["comm_round"])
    except (KeyError, TypeError, ValueError):
        return None


def encode_payload(params: "OrderedDict[str, Any]") -> bytes:
    """FeS's message as a safetensors file. Tensors are copied: a model's tied weights share
    storage, which safetensors refuses."""
    from safetensors.torch import save

    return save({k: v.detach().cpu().contiguous().clone() for k, v in params.items()})


def decode_payload(data: bytes) -> "OrderedDict[str, Any]":
    from safetensors.torch import load

    return OrderedDict(load(data))
