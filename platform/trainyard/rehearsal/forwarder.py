"""A TCP forwarder: pods on the real nodes reach the API server, which listens on 127.0.0.1 only.

The rehearsal's API server binds loopback (every host client uses ``https://127.0.0.1:<port>``), and packets
from a pod are not delivered to 127.0.0.0/8: the kernel drops them as martians unless the bridge they arrive on
has ``route_localnet``, and a DNAT to loopback would have to pre-empt kube-proxy's own DNAT of the ``kubernetes``
Service (a connection is translated once, and an endpoint may not be a loopback address). So one small process
listens on an address of this machine that pods can route to (``in_cluster_api.api_address``) and copies bytes
both ways to the loopback listener: no netfilter rule, no sysctl. It is a plain TCP
relay: TLS stays end to end between the pod and the API server (the pod checks the API server's certificate, the
API server sees the pod's bearer token), only the source address the API server logs is 127.0.0.1.

Run by ``InClusterApi`` as ``python -m trainyard.rehearsal.forwarder --listen ADDR:PORT --to 127.0.0.1:PORT``,
tracked by pid file like every rehearsal process (``processes.py``); SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

CHUNK = 64 * 1024


def parse_address(text: str) -> tuple[str, int]:
    """``"10.244.255.254:26443"`` -> ``("10.244.255.254", 26443)``; ValueError names what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not ADDRESS:PORT")
    return host, int(port)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Copy until end of stream, then pass the half-close on; False when the connection broke instead."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        return False
    return True


async def _relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                 target: tuple[str, int]) -> None:
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(*target)
    except OSError:
        client_writer.close()
        return
    directions = [asyncio.ensure_future(_copy(client_reader, upstream_writer)),
                  asyncio.ensure_future(_copy(upstream_reader, client_writer))]
    # A half-close (end of stream) keeps the other direction open, as TCP does; a broken side closes both,
    # so a long watch whose client went away does not hold a connection to the API server.
    pending = set(directions)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if not all(task.result() for task in done):
            break
    for task in pending:
        task.cancel()
    for writer in (client_writer, upstream_writer):
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def serve(listen: tuple[str, int], target: tuple[str, int], started: asyncio.Event | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Relay every connection to ``listen`` to ``target`` until ``stop`` is set (or SIGTERM/SIGINT in ``main``)."""
    stop = stop or asyncio.Event()
    server = await asyncio.start_server(lambda r, w: _relay(r, w, target), *listen, reuse_address=True)
    if started is not None:
        started.set()
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainyard.rehearsal.forwarder",
                                     description="Relay TCP connections to another address (the API server on loopback).")
    parser.add_argument("--listen", required=True, help="ADDRESS:PORT to accept connections on")
    parser.add_argument("--to", required=True, help="ADDRESS:PORT to relay them to")
    args = parser.parse_args(argv)
    try:
        listen, target = parse_address(args.listen), parse_address(args.to)
    except ValueError as exc:
        parser.error(str(exc))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(listen, target, stop=stop)

    try:
        asyncio.run(run())
    except OSError as exc:
        print(f"forwarder: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
