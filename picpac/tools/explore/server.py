"""Running the explorer: bind a socket (127.0.0.1 by default), say where it listens, serve with uvicorn."""
from __future__ import annotations

import ipaddress
import os
import socket
import threading
import webbrowser
from collections.abc import Callable

from ...errors import PicPacError
from ...file.remote import RemoteOptions

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> list[str] | None:
    """Host headers to answer: on loopback only loopback names (a page on another site that a DNS rebinding
    points at 127.0.0.1 is refused); on another address, any."""
    return ["127.0.0.1", "localhost", "[::1]", "::1"] if is_loopback(host) else None


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PicPacError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, *, open_browser: bool = True,
          echo: Callable[[str], None] = print, warn: Callable[[str], None] = print,
          remote: RemoteOptions | None = None) -> None:
    """Serve the explorer for ``path`` (a file, a URL read with ``remote``'s options, or shards) until
    interrupted."""
    import uvicorn

    from .app import build_app

    app = build_app(path, allowed_hosts=allowed_hosts(host), remote=remote)
    if not is_loopback(host):
        warn(f"warning: listening on {host}, not on loopback: anyone who can reach this address can see every "
             "image of the database (there is no login)")
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    echo(f"picpac explore: serving {os.fspath(path)} at {url} (Ctrl-C stops)")
    if open_browser:
        threading.Timer(1.0, webbrowser.open, (url,)).start()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.state.explorer.index.close()
