"""Running the app with uvicorn: in the foreground for `turnformer serve`, or in a background thread on a free port
of 127.0.0.1 for tests, benchmarks and screenshots (`BackgroundServer`)."""

from __future__ import annotations

import errno
import json
import socket
import threading
import time

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from turnformer.dialogue import DialogueError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (`host`, `port`), taken before the models load, so that an address that cannot serve fails at
    once: a DialogueError naming --host or --port."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
    except socket.gaierror as error:
        raise DialogueError(f"--host {host}: not an address this machine knows ({error.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise DialogueError(f"--port {port}: already in use on {host}; give another --port") from None
        raise DialogueError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})") from None
    return sock


class HeadDeadline(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, where a request's head (its line and headers) must arrive whole within `seconds`
    of the connection or of its first byte: uvicorn times no head (its keep-alive timer restarts at every byte), so a
    client that sends part of one (or a byte a minute) held its connection open for ever. It then gets a 408, as a
    late body does (the app's `BodyLimit`), and its connection is closed; a connection that sent nothing is closed."""

    seconds = 30.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.head_timer = self.loop.call_later(self.seconds, self.head_late)

    def data_received(self, data: bytes) -> None:
        if self.head_timer is None and self.conn.their_state is h11.IDLE:  # a next request begins
            self.head_timer = self.loop.call_later(self.seconds, self.head_late)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # its head is in (the body has the app's own deadline)
            self.stop_head_timer()

    def connection_lost(self, exc) -> None:
        self.stop_head_timer()
        super().connection_lost(exc)

    def stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_late(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.our_state is not h11.IDLE or not self.conn.trailing_data[0]:  # no head begun (a browser's
            self.transport.close()  # spare connection), or mid-answer (pipelined): nothing to answer, closed alone
            return
        body = json.dumps({"error": f"request head not complete within {self.seconds:g} s"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=408, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def head_deadline(app) -> type[HeadDeadline]:
    """The protocol class for `app`: its head deadline the app's own for a body (`app.state.request_seconds`)."""
    seconds = getattr(getattr(app, "state", None), "request_seconds", HeadDeadline.seconds)
    return type("HeadDeadline", (HeadDeadline,), {"seconds": float(seconds)})


def run(app, sock: socket.socket) -> None:
    """Serve `app` on `sock` (`listen`) until Ctrl-C or SIGTERM. One process: its sessions live in its memory."""
    uvicorn.Server(uvicorn.Config(app, log_level="info", server_header=False, http=head_deadline(app))).run(sockets=[sock])


class BackgroundServer:
    """``with BackgroundServer(app) as url:`` the real app, on uvicorn, answering at ``url`` (http://127.0.0.1:PORT,
    a port the system picked free) until the block ends."""

    def __init__(self, app, host: str = "127.0.0.1", start_timeout_s: float = 30.0):
        self.app, self.host, self.start_timeout_s = app, host, start_timeout_s

    def __enter__(self) -> str:
        # bound before uvicorn starts, so that no other process takes the port meanwhile; IPPROTO_TCP named, or asyncio
        # leaves Nagle's algorithm on for its connections (each small answer then waits ~40 ms for a delayed ACK)
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.bind((self.host, 0))
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", server_header=False,
                                                    http=head_deadline(self.app)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"the server did not start within {self.start_timeout_s:g} s")
            time.sleep(0.02)
        return f"http://{self.host}:{self.socket.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
