"""A slow, lossy edge link in user space: an asyncio TCP proxy between a silo and the server.

This kernel has no netem, so tests and benchmarks shape links here. One `Link` is the path
between one silo and the server; it has two directions, `up` (silo -> server) and `down`
(server -> silo), each with its own bandwidth (a token bucket shared by every connection on
the link, as a radio is) and one-way latency with jitter (bytes leave in the order they came).
A link forwards any number of listening ports (`Link.forward`): a gRPC silo needs one towards
the server's port (`up`) and one towards its own port for the server's sends (`down`); an
MQTT_S3 silo one towards the broker and one towards the S3 endpoint (both `up`: the silo opens
them, requests go up, answers come down). The proxy copies bytes and never looks inside: TLS
stays end to end, the proxy sees only ciphertext.

Faults:
- `cut_next(direction, after_bytes)`: the next connection that carries more than
  `after_bytes` in `direction` from now on is aborted right there (both sides see a reset), mid-message;
- `partition(seconds)`: every open connection of the link is aborted and new ones are
  refused (accepted, then closed at once) until `heal()` or the seconds have passed.

Every connection is recorded (`Link.connections`: bytes and first/last byte times per
direction), which is what `benchmarks/link_cost.py` reads to time each message.

    shaper = LinkShaper()                                  # an event loop on a daemon thread
    link = shaper.link("silo1", up_MBps=1, down_MBps=1, latency_s=0.2, jitter_s=0.02)
    port = link.forward(server_port, "up")                 # point the silo at 127.0.0.1:port
    ...
    shaper.close()

As a command (one link, one forwarded port, printed): python benchmarks/link_shaper.py
--to 127.0.0.1:8890 --up-MBps 1 --down-MBps 1 --latency-ms 200
"""

from __future__ import annotations

import argparse
import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MB = 1e6
CHUNK = 16 * 1024  # bytes read at a time
DIRECTIONS = ("up", "down")


class TokenBucket:
    """`rate` bytes/s: each chunk takes len/rate on the wire after the one before it (a virtual
    clock, FIFO over every connection sharing it). A busy link whose event loop woke up to
    `slack_s` late catches up (else each late wake-up would be lost and the link would run ~5%
    slow); a link idle for longer starts afresh, with no credit: no byte is ever free."""

    def __init__(self, rate_Bps: float | None, slack_s: float = 0.005):
        self.rate = rate_Bps
        self.slack_s = slack_s
        self._free_at = time.monotonic()

    async def take(self, n: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        start = self._free_at if self._free_at >= now - self.slack_s else now
        self._free_at = start + n / self.rate
        if (wait := self._free_at - now) > 0:
            await asyncio.sleep(wait)


@dataclass
class Direction:
    bucket: TokenBucket
    latency_s: float = 0.0
    jitter_s: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def delay(self) -> float:
        if not self.jitter_s:
            return self.latency_s
        return max(0.0, self.latency_s + self.rng.uniform(-self.jitter_s, self.jitter_s))


@dataclass
class Connection:
    listener: str  # the listener's name: "<link>:<port>"
    opened: float
    closed: float | None = None
    cut: bool = False
    bytes: dict = field(default_factory=lambda: {d: 0 for d in DIRECTIONS})
    first_in: dict = field(default_factory=dict)  # direction -> time its first byte reached the proxy
    last_in: dict = field(default_factory=dict)  # direction -> time its latest byte reached the proxy
    last_out: dict = field(default_factory=dict)  # direction -> time its last byte left the proxy
    writers: list = field(default_factory=list, repr=False)

    def in_flight(self, direction: str) -> bool:
        """Bytes of this direction came in that have not left yet (held by bandwidth or latency)."""
        return self.last_in.get(direction, 0.0) > self.last_out.get(direction, 0.0)

    def abort(self) -> None:
        for w in self.writers:
            w.transport.abort()


class Link:
    """The path between one silo and the server (see the module docstring)."""

    def __init__(self, shaper: "LinkShaper", name: str, up_MBps, down_MBps, latency_s, jitter_s, seed):
        self.shaper, self.name = shaper, name
        rng = random.Random(seed)
        self.dirs = {
            "up": Direction(TokenBucket(up_MBps * MB if up_MBps else None), latency_s, jitter_s, rng),
            "down": Direction(TokenBucket(down_MBps * MB if down_MBps else None), latency_s, jitter_s, rng),
        }
        self.connections: list[Connection] = []
        self.events: list[str] = []
        self._cut: dict[str, int] = {}  # direction -> after_bytes, one-shot
        # direction -> {id(connection): its bytes when the cut was armed}: a persistent connection
        # (gRPC keeps one for many messages) is cut after `after_bytes` more, not at its next byte
        self._cut_base: dict[str, dict[int, int]] = {}
        self._partitioned_until: float | None = None
        self._servers: list[asyncio.base_events.Server] = []

    # ---- set up (from any thread) --------------------------------------------------------
    def forward(self, target_port: int, direction: str = "up", target_host: str = "127.0.0.1") -> int:
        """Listen on a free loopback port and forward each connection to target; the bytes a
        connecting peer sends travel in `direction`, the answers the other way. Returns the port."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        return self.shaper.call(self._listen(target_host, target_port, direction))

    def shape(self, up_MBps=None, down_MBps=None, latency_s=None, jitter_s=None) -> None:
        """Change the link while it runs (None: keep)."""
        for d, rate in (("up", up_MBps), ("down", down_MBps)):
            if rate is not None:
                self.dirs[d].bucket.rate = rate * MB if rate else None
            if latency_s is not None:
                self.dirs[d].latency_s = latency_s
            if jitter_s is not None:
                self.dirs[d].jitter_s = jitter_s

    def cut_next(self, direction: str, after_bytes: int) -> None:
        """Abort the next connection carrying more than `after_bytes` more in `direction`, there
        (an open connection counts from now: what it carried before is not part of the message)."""
        self.shaper.loop.call_soon_threadsafe(self._arm_cut, direction, int(after_bytes))

    def partition(self, seconds: float | None = None) -> None:
        """Abort every open connection and refuse new ones until `heal()` (or `seconds` pass)."""
        self.shaper.loop.call_soon_threadsafe(self._partition, seconds)

    def heal(self) -> None:
        self.shaper.loop.call_soon_threadsafe(self._heal)

    @property
    def partitioned(self) -> bool:
        until = self._partitioned_until
        return until is not None and time.monotonic() < until

    @property
    def cuts(self) -> int:
        return sum(c.cut for c in self.connections)

    # ---- on the loop ---------------------------------------------------------------------
    def _arm_cut(self, direction: str, after_bytes: int) -> None:
        self._cut[direction] = after_bytes
        self._cut_base[direction] = {id(c): c.bytes[direction] for c in self.connections if c.closed is None}

    def _partition(self, seconds: float | None) -> None:
        self._partitioned_until = time.monotonic() + (seconds if seconds is not None else 1e12)
        self.events.append(f"{time.time():.3f} partition {seconds}")
        for c in self.connections:
            if c.closed is None:
                c.cut = True
                c.abort()

    def _heal(self) -> None:
        self._partitioned_until = None
        self.events.append(f"{time.time():.3f} heal")

    async def _listen(self, host: str, port: int, direction: str) -> int:
        back = "down" if direction == "up" else "up"

        async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
            conn = Connection(listener, time.time(), writers=[client_w])
            self.connections.append(conn)
            if self.partitioned:
                conn.cut, conn.closed = True, time.time()
                client_w.transport.abort()
                return
            try:
                target_r, target_w = await asyncio.open_connection(host, port)
            except OSError:
                conn.closed = time.time()
                client_w.transport.abort()
                return
            conn.writers.append(target_w)
            await asyncio.gather(
                self._pump(client_r, target_w, direction, conn), self._pump(target_r, client_w, back, conn)
            )
            conn.closed = time.time()
            for w in conn.writers:
                w.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        listener = f"{self.name}:{bound}"
        return bound

    async def _pump(self, reader, writer, direction: str, conn: Connection) -> None:
        d = self.dirs[direction]
        queue: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            last = 0.0
            while True:
                at, chunk = await queue.get()
                if chunk is None:
                    if writer.can_write_eof() and not writer.transport.is_closing():
                        writer.write_eof()
                    return
                at = max(at, last)
                last = at
                if (wait := at - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if writer.transport.is_closing():
                    return
                writer.write(chunk)
                await writer.drain()
                conn.last_out[direction] = time.time()

        sender = asyncio.ensure_future(deliver())
        try:
            while chunk := await reader.read(CHUNK):
                conn.first_in.setdefault(direction, time.time())
                limit = self._cut.get(direction)
                if limit is not None:  # the bytes since the cut was armed: only while one is
                    carried = conn.bytes[direction] - self._cut_base[direction].get(id(conn), 0)
                    if carried + len(chunk) > limit:
                        chunk = chunk[: limit - carried]
                        del self._cut[direction]
                        conn.cut = True
                        self.events.append(f"{time.time():.3f} cut {direction} at {limit} bytes ({conn.listener})")
                await d.bucket.take(len(chunk))
                conn.bytes[direction] += len(chunk)
                conn.last_in[direction] = time.time()
                queue.put_nowait((time.monotonic() + d.delay(), chunk))
                if conn.cut or self.partitioned:
                    break
        except (ConnectionError, OSError):
            pass
        if conn.cut or self.partitioned:  # what was let through still arrives, then the reset
            queue.put_nowait((time.monotonic() + d.delay(), b""))
            await asyncio.sleep(max(d.delay(), 0.0) + 0.01)
            conn.cut = True
            conn.abort()
            sender.cancel()
            return
        queue.put_nowait((time.monotonic() + d.delay(), None))
        try:
            await sender
        except (ConnectionError, OSError):
            conn.abort()

    async def _close(self) -> None:
        for s in self._servers:
            s.close()
        for c in self.connections:
            if c.closed is None:
                c.abort()


async def _cancel_tasks() -> None:
    """Every pump still running (connections left open), so the loop stops clean."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class LinkShaper:
    """An asyncio event loop on a daemon thread holding any number of links."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, Link] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="link-shaper", daemon=True)
        self._thread.start()

    def call(self, coro: Any, timeout_s: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def link(
        self,
        name: str,
        up_MBps: float | None = None,
        down_MBps: float | None = None,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        seed: int = 0,
    ) -> Link:
        """A link; a bandwidth of None is unlimited. MB = 10^6 bytes, as the cost model's."""
        link = Link(self, name, up_MBps, down_MBps, latency_s, jitter_s, seed)
        self.links[name] = link
        return link

    def close(self) -> None:
        for link in self.links.values():
            try:
                self.call(link._close())
            except Exception:
                pass
        try:
            self.call(_cancel_tasks())
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)

    def __enter__(self) -> "LinkShaper":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Shape one TCP path: bandwidth per direction, latency, jitter.")
    p.add_argument("--to", required=True, help="HOST:PORT to forward to")
    p.add_argument("--direction", default="up", choices=DIRECTIONS, help="which way the connecting side's bytes go")
    p.add_argument("--up-MBps", type=float, default=None)
    p.add_argument("--down-MBps", type=float, default=None)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    args = p.parse_args(argv)
    host, port = args.to.rsplit(":", 1)
    with LinkShaper() as shaper:
        link = shaper.link("cli", args.up_MBps, args.down_MBps, args.latency_ms / 1e3, args.jitter_ms / 1e3)
        listen = link.forward(int(port), args.direction, host)
        print(f"127.0.0.1:{listen} -> {args.to}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
