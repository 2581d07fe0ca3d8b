"""FedML's gRPC and MQTT_S3 communication managers, set up for FeS's cross-silo processes.

Three things FedML 0.9.6 leaves open are closed here:
- gRPC: its receive loop polls the message queue without sleeping (one busy core per
  process; on a 4-core edge box running server + 3 silos that is most of the machine), its
  sends have no deadline (a peer that is alive but stuck blocks the sender forever), and
  both sides pickle the whole message (`grpc_comm_manager.py`,
  its pickle dump and load of the message, lines 115 and 167): any
  peer that reaches the port runs code in the process. `BlockingGrpcCommManager` keeps
  FedML's server, servicer and ipconfig handling and replaces those two methods; messages
  are FES1 bytes (`adapters/codec.py`: JSON + raw tensor bytes, sizes checked before any
  array exists), and anything else on the port is dropped with one log line.
- MQTT_S3: FedML falls back to fetching the FedML cloud's broker and bucket whenever the
  customized configs are missing; `fedml_args` always passes both (checked non-empty by
  the settings), and `flush_mqtt` lets the last messages leave before disconnecting.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any, Callable, Iterator

from fedml_fes.config import FesConfig
from fedml_fes_plugins.adapters.codec import CodecError, decode, encode
from fedml_fes_plugins.adapters.offline import import_fedml
from fedml_fes_plugins.cross_silo.certs import rank_name
from fedml_fes_plugins.cross_silo.config import CrossSiloSettings
from fedml_fes_plugins.cross_silo.tls import TlsFiles, tls_for

import_fedml()  # quiet import: FedML warns about pkg_resources/urllib3 at import time
import grpc
from fedml.core.distributed.communication.constants import CommunicationConstants
from fedml.core.distributed.communication.grpc import grpc_comm_manager_pb2, grpc_comm_manager_pb2_grpc
from fedml.core.distributed.communication.grpc.grpc_comm_manager import GRPCCommManager, GRPCMapping
from fedml.core.distributed.communication.grpc.grpc_server import GRPCCOMMServicer
from fedml.core.distributed.communication.message import Message

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 600.0  # one message, payload included, on the slowest link we support
MAX_MESSAGE_BYTES = 1000 * 1024 * 1024  # FedML's gRPC max_receive_message_length (grpc_comm_manager.py)
STOP_GRACE_S = 2.0  # a reply already on its way back needs milliseconds on loopback or a LAN
MQTT_FLUSH_S = 15.0  # the last QoS 2 messages (FINISHED) leave well within this on any broker we support


def fedml_args(cfg: FesConfig, settings: CrossSiloSettings, rank: int) -> SimpleNamespace:
    """The flat FedML args of one cross-silo process (what `fedml.init` and the comm managers read)."""
    args = cfg.flat_args()
    args.training_type = "cross_silo"
    args.scenario = "horizontal"
    args.backend = settings.backend
    args.rank = rank
    args.role = "server" if rank == 0 else "client"
    args.worker_num = settings.silo_num
    args.run_id = settings.run_id
    args.server_id = settings.server_id
    if rank == 0:
        args.client_id_list = str([settings.wire_id(r) for r in settings.ranks])
    else:
        args.client_id = settings.wire_id(rank)
        args.client_id_list = str([settings.wire_id(rank)])
    if settings.backend == "GRPC":
        args.grpc_ipconfig_path = settings.grpc_ipconfig_path
    else:  # never empty: FedML would fetch the FedML cloud's configs
        args.customized_training_mqtt_config = dict(settings.mqtt)
        args.customized_training_s3_config = dict(settings.s3)
    return args


class IdentifyingServicer(GRPCCOMMServicer):
    """FedML's servicer, queueing with each message who sent it: the peer's address and,
    under TLS, the name on its verified certificate ("" without TLS)."""

    def sendMessage(self, request, context):  # noqa: N802 (FedML's gRPC method name)
        names = context.auth_context().get("x509_common_name") or [b""]
        self.message_q.put((names[0].decode(errors="replace"), context.peer(), request.message))
        return grpc_comm_manager_pb2.CommResponse()


class BlockingGrpcCommManager(GRPCCommManager):
    """FedML's gRPC manager with a blocking receive loop, bounded sends, FES1 messages and,
    with `comm_args.tls_*` set, mutual TLS (`tls.py`)."""

    wait_for_ready = False  # a send to a peer that is not listening fails at once

    def __init__(self, grpc_ipconfig_path, topic="fedml", client_rank=0, client_num=0, args=None):
        """FedML's constructor (`grpc_comm_manager.py:35-104`) with two changes: the servicer
        records who sent each message, and the port is a TLS one when `args` names the files
        (FedML's is always `add_insecure_port`, line 95)."""
        self._topic = topic
        self._observers = []
        self.grpc_ipconfig_path = grpc_ipconfig_path
        self.grpc_mappings = {}
        self.client_rank = self.client_id = client_rank
        self.client_num = client_num
        self.args = args
        self.tls = tls_for(args, client_rank) if args is not None else None
        self._init_grpc_mappings()
        self.node_type = "server" if client_rank == 0 else "client"
        self.opts = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_http_proxy", 0),
        ]
        if self.client_id not in self.grpc_mappings:  # as FedML: a rank without a row listens on 8890+rank
            self.grpc_mappings[self.client_id] = GRPCMapping(
                self.client_id, self.client_id, "0.0.0.0", CommunicationConstants.GRPC_BASE_PORT + client_rank, None
            )
        me = self.grpc_mappings[self.client_id]
        self.grpc_server = grpc.server(ThreadPoolExecutor(max_workers=max(client_num, 1)), options=self.opts)
        self.grpc_servicer = IdentifyingServicer(me.grpc_server_ip, me.grpc_server_port, client_num, client_rank)
        grpc_comm_manager_pb2_grpc.add_gRPCCommManagerServicer_to_server(self.grpc_servicer, self.grpc_server)
        address = f"{me.grpc_server_ip}:{me.grpc_server_port}"
        if self.tls is None:
            self.grpc_server.add_insecure_port(address)
        else:
            self.grpc_server.add_secure_port(address, self.tls.grpc_server_credentials())
            self._channel_credentials = self.tls.grpc_channel_credentials()
        self.grpc_server.start()
        self.is_running = True
        log.info("gRPC server of rank %s on %s (%s)", client_rank, address, "mutual TLS" if self.tls else "plaintext")

    def message_handling_subroutine(self) -> None:
        while self.is_running:
            try:
                item = self.grpc_servicer.message_q.get(timeout=0.2)
            except queue.Empty:
                continue
            msg = self._accept(*item)
            if msg is None:
                continue
            for observer in self._observers:
                observer.receive_message(msg.get_type(), msg)

    def _accept(self, identity: str, peer: str, raw: bytes) -> Message | None:
        """The message, or None (one log line naming the peer) when it is not FES1 or, under
        TLS, its sender rank is not the rank on the peer's certificate."""
        try:
            msg = Message()
            msg.init_from_json_object(decode(raw, MAX_MESSAGE_BYTES))
            msg.get_type()
            sender = int(msg.get_sender_id())
        except (CodecError, KeyError, TypeError, ValueError) as e:  # a pickle or garbage: never run, never fatal
            log.warning("dropped a gRPC message from %s that is not FES1: %s", peer, e)
            return None
        if self.tls is not None and identity != rank_name(sender):
            log.warning(
                "refused a gRPC message from %s: it says rank %s, its certificate is %s",
                peer,
                sender,
                identity or "none",
            )
            return None
        return msg

    def stop_receive_message(self) -> None:
        """FedML stops its server with no grace (`grpc_comm_manager.py:196`, `stop(None)`),
        which cancels calls still in flight: a silo whose message the loop had already taken
        off the queue saw its send fail with "Cancelling all calls" (seen in CI). New calls are
        refused at once; the ones in flight get a moment to return."""
        self.grpc_server.stop(STOP_GRACE_S)
        self.is_running = False

    def send_message(self, msg: Message, timeout_s: float = SEND_TIMEOUT_S) -> None:
        me = self.grpc_mappings[self.client_id]
        msg.add_params(GRPCCommManager.MSG_ARG_KEY_SENDER_RANK, self.client_rank)
        msg.add_params(GRPCCommManager.MSG_ARG_KEY_SENDER_IP, me.ingress_ip or me.grpc_server_ip)
        msg.add_params(GRPCCommManager.MSG_ARG_KEY_SENDER_PORT, me.grpc_server_port)
        peer = self.grpc_mappings[int(msg.get_receiver_id())]
        request = grpc_comm_manager_pb2.CommRequest(client_id=self.client_id, message=encode(msg.get_params()))
        # A fresh channel per message, as FedML does: a cached one to a peer that died keeps
        # failing through gRPC's reconnect backoff after the peer is back.
        address = f"{peer.ingress_ip or peer.grpc_server_ip}:{peer.grpc_server_port}"
        if self.tls is None:
            channel = grpc.insecure_channel(address, options=self.opts)
        else:  # only a server whose certificate names the receiver's rank is accepted
            override = [("grpc.ssl_target_name_override", rank_name(peer.rank))]
            channel = grpc.secure_channel(address, self._channel_credentials, options=self.opts + override)
        with channel:
            grpc_comm_manager_pb2_grpc.gRPCCommManagerStub(channel).sendMessage(
                request, timeout=timeout_s, wait_for_ready=self.wait_for_ready
            )


class StartupTolerantGrpcCommManager(BlockingGrpcCommManager):
    """For FedML's own cross-silo runtime (FedMLRunner): its processes start in any order,
    and FedML's first messages (status checks, connection-ready) go out at once, so a send
    waits for the peer to listen (gRPC's wait_for_ready, bounded) instead of failing."""

    wait_for_ready = True

    def send_message(self, msg: Message, timeout_s: float = SEND_TIMEOUT_S) -> None:
        """A send to a server that this silo has already heard from and that is now gone
        (the server failed while this silo was still training) ends the silo in the same
        one line as `ServerWatch`, instead of a gRPC traceback."""
        try:
            super().send_message(msg, timeout_s)
        except grpc.RpcError as e:
            watch = getattr(self.args, "fes_server_watch", None)
            if watch is None or not watch.armed.is_set() or watch.server_alive():
                raise
            watch.stop(f"send failed: {e.code() if callable(getattr(e, 'code', None)) else e}")


def use_startup_tolerant_grpc() -> None:
    """FedML 0.9.6 `core/distributed/fedml_comm_manager.py:190` imports `GRPCCommManager` from
    `communication/grpc/grpc_comm_manager.py` when a manager starts; that class sends without
    waiting for the peer (line 138: a silo started before the server dies with UNAVAILABLE)
    and polls its queue without sleeping (line 157: a busy core per process). Point the name
    at `StartupTolerantGrpcCommManager` before FedMLRunner builds its managers."""
    from fedml.core.distributed.communication.grpc import grpc_comm_manager

    grpc_comm_manager.GRPCCommManager = StartupTolerantGrpcCommManager


def make_grpc_manager(args: Any, rank: int, size: int) -> BlockingGrpcCommManager:
    return BlockingGrpcCommManager(args.grpc_ipconfig_path, client_rank=rank, client_num=max(size, 1), args=args)


def flush_mqtt(com_manager: Any, timeout_s: float = 3.0) -> None:
    """Wait (bounded) until paho has no QoS>0 message in flight, so a disconnect drops none."""
    client = getattr(getattr(com_manager, "mqtt_mgr", None), "_client", None)
    pending = getattr(client, "_out_messages", None)
    if pending is None:
        return
    deadline = time.monotonic() + timeout_s
    while len(pending) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def disconnect_in_loop_thread(com_manager: Any) -> Iterator[None]:
    """Run FedML's MQTT stop (`mqtt_s3_multi_clients_comm_manager.py:334-337`: loop_stop, then
    disconnect) from a thread other than paho's loop without racing that loop.

    FedML runs paho's `loop_forever` on the process's main thread (line 331). paho 1.6.1's
    `_packet_queue` (client.py:3013-3016) writes a queued packet at once, from the calling
    thread, whenever no callback is running; for DISCONNECT that write also closes the socket
    (client.py:2500-2505). Called from another thread, the socket closes while the loop
    thread sits between `select` and `recv`, and the loop dies with "OSError: [Errno 9] Bad
    file descriptor": a finished silo exited with code 1 (seen in CI). Holding paho's
    in-callback lock for the call makes `_packet_queue` leave the DISCONNECT to the loop,
    which it wakes through its socket pair: the loop writes it, closes its own socket and
    returns. A client driven by `loop_start`'s thread never writes from the caller: no lock."""
    client = getattr(getattr(com_manager, "mqtt_mgr", None), "_client", None)
    lock = getattr(client, "_in_callback_mutex", None)
    if lock is None or getattr(client, "_thread", None) is not None:
        yield
        return
    with lock:
        yield


def flush_then_stop(com_manager: Any, stop: Callable[[], None], timeout_s: float = 3.0) -> None:
    """Close a connection as a FedML sender must: let the last QoS>0 messages leave
    (`flush_mqtt`, bounded), then run `stop` with the socket left to paho's loop
    (`disconnect_in_loop_thread`). For gRPC both halves do nothing and `stop` runs as is."""
    flush_mqtt(com_manager, timeout_s=timeout_s)
    with disconnect_in_loop_thread(com_manager):
        stop()


def use_flushing_mqtt_stop() -> None:
    """FedML 0.9.6's silo says FINISHED and disconnects at once
    (`cross_silo/client/fedml_client_master_manager.py:162-165`): the status is published at
    QoS 2 without waiting (`mqtt_s3/mqtt_s3_multi_clients_comm_manager.py:248`) and
    `stop_receive_message` (lines 334-337) stops paho's loop and disconnects, all inside
    paho's message callback, so the QoS 2 handshake never completes, the broker never
    releases the status, and the server, which ends only once every silo said FINISHED
    (`cross_silo/server/fedml_server_manager.py:146-164`), waits forever. The stop is
    deferred to a thread that lets paho's loop (running again once the callback returns)
    drain the outgoing queue (bounded, `flush_mqtt`) and then runs FedML's stop, leaving the
    socket to paho's loop (`disconnect_in_loop_thread`)."""
    from fedml.core.distributed.communication.mqtt_s3 import mqtt_s3_multi_clients_comm_manager as mqtt_s3

    cls = mqtt_s3.MqttS3MultiClientsCommManager
    original = cls.stop_receive_message
    if getattr(original, "fes_flushes", False):
        return

    def stop_receive_message(self) -> threading.Thread:
        worker = threading.Thread(
            target=flush_then_stop, args=(self, lambda: original(self), MQTT_FLUSH_S), name="fes-mqtt-stop"
        )  # not a daemon: it must run
        worker.start()
        return worker

    stop_receive_message.fes_flushes = True
    cls.stop_receive_message = stop_receive_message


def use_outgoing_only_inflight_count() -> None:
    """paho-mqtt 1.6.1 counts a client's outgoing QoS 1/2 messages in flight and holds back
    more than 20 (`max_inflight_messages`), but its `_handle_pubrel` (client.py:3357) also
    subtracts one for every *incoming* QoS 2 message it completes. FedML's servers receive one
    per device status and update, so the count goes negative and the next burst (the server's
    CHECK_CLIENT_STATUS or INIT to every device, `cross_device/server_mnn/
    fedml_server_manager.py:259-270`) leaves all at once; mosquitto 2 takes at most 20 QoS 2
    messages in flight from a client and drops the rest. With 100 devices, 80 never heard from
    the server and the run stalled. The stand-in completes an incoming QoS 2 message without
    touching the outgoing count (everything else as paho does it)."""
    import struct

    import paho.mqtt.client as mqtt

    if getattr(mqtt.Client._handle_pubrel, "fes_outgoing_only", False):
        return

    def _handle_pubrel(self) -> int:
        length = self._in_packet["remaining_length"]
        if (length < 2) if self._protocol == mqtt.MQTTv5 else (length != 2):
            return mqtt.MQTT_ERR_PROTOCOL
        (mid,) = struct.unpack("!H", self._in_packet["packet"][:2])
        self._easy_log(mqtt.MQTT_LOG_DEBUG, "Received PUBREL (Mid: %d)", mid)
        with self._in_message_mutex:
            if mid in self._in_messages:  # once: a repeated PUBREL is only acknowledged
                self._handle_on_message(self._in_messages.pop(mid))
        return self._send_pubcomp(mid)

    _handle_pubrel.fes_outgoing_only = True
    mqtt.Client._handle_pubrel = _handle_pubrel


def use_safe_s3_models(max_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """FedML 0.9.6's MQTT_S3 transport puts each message's model params in the bucket as a
    pickle (`core/distributed/communication/s3/remote_storage.py:81`, `write_model`) and
    unpickles whatever object the MQTT message names (`:260`, `read_model`): anyone who can
    write to the bucket, or publish a key, runs code in the reader. Both are replaced: the
    object is FES1 bytes (`adapters/codec.py`), its size is read from S3 (`head_object`) and
    checked before the download, and it is decoded in memory (nothing is cached on disk). An
    object that is not FES1, or too large, is dropped with one log line: FedML then hands the
    observer no params, which the update checks refuse (`cross_silo/protocol.py`)."""
    import io

    from fedml.core.distributed.communication.s3.remote_storage import S3Storage

    if getattr(S3Storage.read_model, "fes_safe", False):
        return

    def write_model(self, message_key: str, model: Any) -> str:
        self.aws_s3_client.upload_fileobj(
            Fileobj=io.BytesIO(encode({"model": model})), Bucket=self.bucket_name, Key=message_key
        )
        return self.aws_s3_client.generate_presigned_url(
            "get_object", ExpiresIn=60 * 60 * 24 * 5, Params={"Bucket": self.bucket_name, "Key": message_key}
        )

    def read_model(self, message_key: str) -> Any:
        try:
            size = int(self.aws_s3_client.head_object(Bucket=self.bucket_name, Key=message_key)["ContentLength"])
            if size > max_bytes:
                raise CodecError(f"object {message_key} of {size:,} bytes is over the limit of {max_bytes:,}")
            buffer = io.BytesIO()
            self.aws_s3_client.download_fileobj(Bucket=self.bucket_name, Key=message_key, Fileobj=buffer)
            return decode(buffer.getbuffer(), max_bytes)["model"]
        except (CodecError, KeyError) as e:
            log.warning("dropped an S3 object that is not FES1: %s", e)
            return None

    read_model.fes_safe = True
    S3Storage.write_model = write_model
    S3Storage.read_model = read_model


def serialize_tls_io(client: Any) -> None:
    """One TLS record at a time on a paho client's socket.

    FedML runs paho's `loop_forever` on its receive thread while the role's logic publishes
    from another; paho 1.6.1 then writes the packet from the publishing thread
    (`client.py:3013-3016`: no `loop_start` thread, no callback running) while the loop
    thread may be reading. On a plain socket that is harmless; an OpenSSL connection must not
    be used by two threads at once: the records interleave and the peer drops the connection
    ("bad record mac", seen in a TLS run). The socket is non-blocking, so holding a lock
    around each read and write costs nothing."""
    lock = threading.Lock()
    recv, send = client._sock_recv, client._sock_send

    def locked_recv(bufsize: int) -> bytes:
        with lock:
            return recv(bufsize)

    def locked_send(buf: bytes) -> int:
        with lock:
            return send(buf)

    client._sock_recv, client._sock_send = locked_recv, locked_send


def use_tls_mqtt(tls: TlsFiles | None) -> None:
    """FedML 0.9.6 makes its paho client without TLS (`mqtt/mqtt_manager.py:53`, in
    `init_connect`, which `reconnect` calls again): after it, the client is given this
    process's CA, certificate and key, so the broker sees who connects (the certificate's
    name is the MQTT user its ACL knows). None: FedML's plaintext client, as it is."""
    from fedml.core.distributed.communication.mqtt.mqtt_manager import MqttManager

    original = getattr(MqttManager.init_connect, "fes_original", MqttManager.init_connect)
    if tls is None:
        MqttManager.init_connect = original
        return

    def init_connect(self) -> None:
        original(self)
        self._client.tls_set(ca_certs=tls.ca, certfile=tls.cert, keyfile=tls.key)
        serialize_tls_io(self._client)

    init_connect.fes_original = original
    MqttManager.init_connect = init_connect
