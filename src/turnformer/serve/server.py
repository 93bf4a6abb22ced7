"""Running the app with uvicorn: in the foreground for `turnformer serve`, or in a background thread on a free port
of 127.0.0.1 for tests, benchmarks and screenshots (`BackgroundServer`)."""

from __future__ import annotations

import errno
import socket
import threading
import time

import uvicorn

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


def run(app, sock: socket.socket) -> None:
    """Serve `app` on `sock` (`listen`) until Ctrl-C or SIGTERM. One process: its sessions live in its memory."""
    uvicorn.Server(uvicorn.Config(app, log_level="info", server_header=False)).run(sockets=[sock])


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
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", server_header=False))
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
