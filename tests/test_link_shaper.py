"""The link shaper (benchmarks/link_shaper.py) on plain loopback sockets: bandwidth per
direction, latency, a cut mid-message, a partition and its heal. Fast lane, seconds."""

import socket
import threading
import time

import pytest

from .conftest import load_benchmark_script

shaper_mod = load_benchmark_script("link_shaper")


class Sink:
    """A loopback server: reads everything each connection sends (recording how much), then
    answers `reply` bytes and closes."""

    def __init__(self, reply: int = 0):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.received: list[int] = []
        self.ended: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        got, how = 0, "eof"
        try:
            while data := conn.recv(65536):
                got += len(data)
                if data.endswith(b"!"):  # end of the request
                    break
            if self.reply:
                conn.sendall(b"x" * self.reply)
        except ConnectionResetError:
            how = "reset"
        finally:
            conn.close()
        self.received.append(got)
        self.ended.append(how)


@pytest.fixture
def shaper():
    s = shaper_mod.LinkShaper()
    yield s
    s.close()


def _request(port: int, size: int, expect: int = 0) -> tuple[float, int]:
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"x" * (size - 1) + b"!")
        got = 0
        while got < expect and (data := c.recv(65536)):
            got += len(data)
    return time.monotonic() - t0, got


def test_link_bandwidth_caps_each_direction_on_its_own(shaper):
    sink = Sink(reply=200_000)
    link = shaper.link("a", up_MBps=1.0, down_MBps=4.0)
    port = link.forward(sink.port, "up")
    seconds, got = _request(port, 300_000, expect=200_000)
    # 0.3 s up at 1 MB/s, then 0.05 s down at 4 MB/s: never faster; slower only on a loaded host
    assert got == 200_000 and 0.34 <= seconds <= 0.7, seconds
    conn = link.connections[-1]
    assert conn.bytes == {"up": 300_000, "down": 200_000}


def test_link_token_bucket_keeps_its_rate_when_the_event_loop_wakes_late(monkeypatch):
    """A fake clock: every sleep overshoots by 1 ms (a loaded event loop). 1 MB in 16 KiB
    chunks at 2 MB/s still takes 0.5 s plus the last overshoot, not 0.5 s plus one per chunk;
    and an idle link gets no credit: a chunk after a pause takes its own time again."""
    import asyncio

    now = [100.0]

    async def late_sleep(seconds: float) -> None:
        now[0] += seconds + 0.001

    monkeypatch.setattr(shaper_mod.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(shaper_mod.asyncio, "sleep", late_sleep)
    bucket = shaper_mod.TokenBucket(2e6)

    async def send(n: int) -> None:
        for _ in range(n // 16_384):
            await bucket.take(16_384)
        await bucket.take(n % 16_384)

    asyncio.run(send(1_000_000))
    assert 0.5 <= now[0] - 100.0 <= 0.5015  # lost overshoots would add 61 ms
    now[0] += 10.0  # idle
    start = now[0]
    asyncio.run(send(20_000))
    assert 0.01 <= now[0] - start <= 0.0115


def test_link_latency_and_jitter_delay_every_byte_in_order(shaper):
    sink = Sink(reply=10)
    link = shaper.link("b", latency_s=0.1, jitter_s=0.02)
    port = link.forward(sink.port, "up")
    seconds, got = _request(port, 10, expect=10)
    assert got == 10 and 0.16 <= seconds <= 0.45, seconds  # one round trip: 2 x (0.1 +- 0.02)


def test_link_cut_mid_message_delivers_a_prefix_then_resets_both_sides(shaper):
    sink = Sink()
    link = shaper.link("c", up_MBps=2.0)
    port = link.forward(sink.port, "up")
    link.cut_next("up", 20_000)
    with pytest.raises(OSError):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"x" * 200_000 + b"!")
            if not c.recv(10):  # a peer that closed instead of resetting
                raise ConnectionResetError("closed")
    deadline = time.monotonic() + 5
    while not sink.received and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sink.received == [20_000] and link.cuts == 1
    _, got = _request(port, 50_000)  # one-shot: the next message passes whole
    time.sleep(0.1)
    assert sink.received[-1] == 50_000


def test_link_partition_refuses_until_healed(shaper):
    sink = Sink(reply=5)
    link = shaper.link("d")
    port = link.forward(sink.port, "down")
    assert _request(port, 100, expect=5)[1] == 5
    link.partition(0.5)
    time.sleep(0.05)
    with pytest.raises(OSError):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"y!")
            if not c.recv(10):
                raise ConnectionResetError("closed")
    time.sleep(0.6)  # the partition's seconds pass: healed
    assert _request(port, 100, expect=5)[1] == 5
    link.partition()
    time.sleep(0.05)
    link.heal()
    time.sleep(0.05)
    assert _request(port, 100, expect=5)[1] == 5


def _wait(condition, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_link_cut_counts_an_open_connections_bytes_from_when_it_is_armed(shaper):
    """gRPC keeps one connection for many messages: a cut armed after that connection carried
    more than `after_bytes` waits for that many more (the next message, mid-way), not for its
    next byte (a few bytes such as a ping would take the cut, and the update meant gets through)."""
    sink = Sink()
    link = shaper.link("d")
    port = link.forward(sink.port, "up")
    with pytest.raises(OSError):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"x" * 30_000)  # an earlier message on the same connection
            _wait(lambda: link.connections and link.connections[-1].bytes["up"] == 30_000)
            link.cut_next("up", 20_000)
            time.sleep(0.1)  # armed on the shaper's loop
            c.sendall(b"y" * 10)  # a ping: passes
            _wait(lambda: link.connections[-1].bytes["up"] == 30_010)
            assert link.cuts == 0
            c.sendall(b"x" * 200_000 + b"!")
            if not c.recv(10):  # a peer that closed instead of resetting
                raise ConnectionResetError("closed")
    _wait(lambda: sink.received)
    assert sink.received == [50_000] and link.cuts == 1  # 20,000 bytes after arming, the ping among them
