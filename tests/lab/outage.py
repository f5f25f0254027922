"""A TCP forwarder in front of a server that the test can take down and bring back: an outage as a client sees it.

While down, every open connection is cut and each new one is accepted and closed at once (what a client of a
restarting server's Service sees: connections reset, nothing answered). Up, bytes pass both ways unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit


class Outage:
    def __init__(self, url: str, port: int = 0) -> None:
        """A forwarder to ``url``'s host and port, on loopback ``port`` (0: any free one)."""
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"the forwarder needs a host and a port in {url!r}")
        self.target = (parts.hostname, parts.port)
        self.listener = socket.create_server(("127.0.0.1", port))
        port = self.listener.getsockname()[1]
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
        self.down = False
        self.refused = 0  # connections cut or closed while down
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def __enter__(self) -> Outage:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._closed.set()
        self.listener.close()
        self._cut_all()

    def cut(self) -> None:
        with self._lock:
            self.down = True
        self._cut_all()

    def restore(self) -> None:
        with self._lock:
            self.down = False

    def _cut_all(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
            self.refused += len(sockets) // 2
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                down = self.down
                if down:
                    self.refused += 1
            if down:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)  # an idle keep-alive connection stays open, as it would without the forwarder
            with self._lock:
                self._open |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if self.down:
                    break
                sink.sendall(chunk)
        with self._lock:
            self._open -= {source, sink}
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
