"""Messages without pickle (plugins/adapters/codec.py): what the gRPC transport sends and takes."""

import os
import pickle
import struct
from collections import OrderedDict

import numpy as np
import pytest
import torch

from fedml_fes_plugins.adapters.codec import MAGIC, CodecError, decode, encode

LIMIT = 1 << 30


def test_a_message_round_trips_with_its_types():
    params = {
        "msg_type": 3,
        "sender": 0,
        "receiver": 2,
        "note": "x",
        "ratio": 0.5,
        "none": None,
        "flag": True,
        "nan": float("nan"),
        "model_params": OrderedDict(
            [
                ("b", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
                ("a", np.ones(4, dtype=np.int64)),
                ("h", torch.ones(2, dtype=torch.bfloat16)),
            ]
        ),
        "ids": (1, 2),
        "by_client": {0: [1.0, 2.0], 1: []},
        "scalar": np.float32(2.5),
        "nested": [{"k": np.zeros(0)}],
    }
    back = decode(encode(params), LIMIT)
    assert type(back["model_params"]) is OrderedDict and list(back["model_params"]) == ["b", "a", "h"]
    assert torch.equal(back["model_params"]["b"], params["model_params"]["b"])
    assert isinstance(back["model_params"]["a"], np.ndarray) and back["model_params"]["a"].dtype == np.int64
    assert back["model_params"]["h"].dtype == torch.bfloat16 and torch.equal(
        back["model_params"]["h"], params["model_params"]["h"]
    )
    assert back["ids"] == (1, 2) and back["by_client"] == {0: [1.0, 2.0], 1: []} and back["scalar"] == 2.5
    assert back["nested"][0]["k"].shape == (0,) and np.isnan(back["nan"]) and back["none"] is None


class _Evil:
    """Unpickling this writes a file: what a rogue peer would send."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    bomb = pickle.dumps(_Evil(str(marker)))
    with pytest.raises(CodecError, match="not a FES1 message"):
        decode(bomb, LIMIT)
    assert not marker.exists()


def test_objects_are_refused_when_sending():
    with pytest.raises(CodecError, match="cannot send a value of type _Evil"):
        encode({"x": _Evil("/nonexistent")})


def _forged(tensors, body=b"", params=None):
    import json

    header = json.dumps(
        {"params": params if params is not None else {"t": {"__tensor__": 0}}, "tensors": tensors}
    ).encode()
    return MAGIC + struct.pack("<Q", len(header)) + header + body


@pytest.mark.parametrize(
    "entry,body,match",
    [
        ({"dtype": "float32", "shape": [1 << 40], "offset": 0, "nbytes": 16}, b"\0" * 16, "cannot be 16 bytes"),
        ({"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 1 << 40}, b"\0" * 16, "lie outside"),
        ({"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}, b"\0" * 8, "not allowed"),
        ({"dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4}, b"\0" * 4, "not a list of sizes"),
        ({"dtype": "float32", "shape": [2], "offset": -4, "nbytes": 8}, b"\0" * 8, "lie outside"),
    ],
)
def test_sizes_and_dtypes_are_checked_before_an_array_exists(entry, body, match):
    with pytest.raises(CodecError, match=match):
        decode(_forged([entry], body), LIMIT)


def test_oversized_or_truncated_messages_are_refused():
    raw = encode({"t": np.zeros(1000, dtype=np.float32)})
    with pytest.raises(CodecError, match="over the limit"):
        decode(raw, 1000)
    with pytest.raises(CodecError, match="does not fit"):
        decode(raw[:20], LIMIT)
    with pytest.raises(CodecError, match="does not hold"):
        decode(_forged([], params={"t": {"__tensor__": 3}}), LIMIT)
    with pytest.raises(CodecError, match="not a FES1"):
        decode(os.urandom(64), LIMIT)


def _free_port() -> int:
    from fedml_fes_plugins.cross_silo.services import free_port

    return free_port()


def test_a_rogue_peer_on_the_grpc_port_runs_no_code_and_the_silo_goes_on(tmp_path, caplog):
    """Real gRPC on loopback, FedML's server and servicer with our receive loop: a pickle sent to
    the port by a peer is dropped with one log line (no file appears); the next real message
    from a silo arrives whole."""
    import queue
    import threading
    import time

    import grpc
    from fedml.core.distributed.communication.grpc import grpc_comm_manager_pb2, grpc_comm_manager_pb2_grpc
    from fedml.core.distributed.communication.message import Message

    from fedml_fes_plugins.cross_silo.transport import BlockingGrpcCommManager

    ports = [_free_port(), _free_port()]
    ipconfig = tmp_path / "ipconfig.csv"
    ipconfig.write_text(
        "eid,rank,grpc_server_ip,grpc_server_port\n" + "".join(f"{r},{r},127.0.0.1,{p}\n" for r, p in enumerate(ports))
    )
    server = BlockingGrpcCommManager(str(ipconfig), client_rank=0, client_num=1)
    silo = BlockingGrpcCommManager(str(ipconfig), client_rank=1, client_num=1)
    got = []

    class Observer:
        def receive_message(self, msg_type, msg):
            got.append(msg)
            server.stop_receive_message()

    class SlowReplyQueue(queue.Queue):
        """The servicer's reply leaves only after the loop has taken the message and stopped the
        server: the race FedML's graceless stop lost (the silo's send was cancelled)."""

        def put(self, item, block=True, timeout=None):
            super().put(item, block, timeout)
            time.sleep(0.3)

    server.grpc_servicer.message_q = SlowReplyQueue()
    server.add_observer(Observer())
    loop = threading.Thread(target=server.message_handling_subroutine, daemon=True)
    loop.start()
    try:
        marker = tmp_path / "pwned"
        with grpc.insecure_channel(f"127.0.0.1:{ports[0]}") as channel:
            grpc_comm_manager_pb2_grpc.gRPCCommManagerStub(channel).sendMessage(
                grpc_comm_manager_pb2.CommRequest(client_id=1, message=pickle.dumps(_Evil(str(marker)))), timeout=10
            )
        msg = Message(7, 1, 0)
        msg.add_params("model_params", OrderedDict([("w", torch.ones(3))]))
        silo.send_message(msg, timeout_s=10)
        loop.join(timeout=20)
    finally:
        server.stop_receive_message()
        for m in (server, silo):
            m.grpc_server.stop(0)
    assert not marker.exists()
    assert any("dropped a gRPC message from ipv4:127.0.0.1:" in r.getMessage() for r in caplog.records)
    assert (
        len(got) == 1
        and got[0].get_type() == 7
        and torch.equal(got[0].get_params()["model_params"]["w"], torch.ones(3))
    )


def test_the_s3_transport_stores_fes1_and_refuses_a_planted_pickle(tmp_path, caplog):
    """MQTT_S3's bucket (moto, in process): model params go up as FES1 bytes and come back as
    the same tensors; a pickle planted under a key is dropped (no file appears) and so is an
    object over the size limit, both before anything is decoded."""
    import boto3
    from fedml.core.distributed.communication.s3.remote_storage import S3Storage
    from moto import mock_aws

    from fedml_fes_plugins.cross_silo.transport import use_safe_s3_models

    use_safe_s3_models(max_bytes=1 << 20)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="fes")
        storage = object.__new__(S3Storage)
        storage.aws_s3_client, storage.bucket_name = client, "fes"
        params = OrderedDict([("w", torch.arange(4.0)), ("b", torch.zeros(2))])
        storage.write_model("good", params)
        assert client.get_object(Bucket="fes", Key="good")["Body"].read().startswith(MAGIC)
        back = storage.read_model("good")
        assert list(back) == ["w", "b"] and torch.equal(back["w"], params["w"])
        marker = tmp_path / "pwned"
        client.put_object(Bucket="fes", Key="planted", Body=pickle.dumps(_Evil(str(marker))))
        assert storage.read_model("planted") is None and not marker.exists()
        client.put_object(Bucket="fes", Key="huge", Body=MAGIC + b"\0" * (2 << 20))
        assert storage.read_model("huge") is None
    assert sum("dropped an S3 object that is not FES1" in r.getMessage() for r in caplog.records) == 2
