"""picpac.tools.explore.server: which hosts are loopback, the Host headers answered, the listening socket and
its refusals, and serve() on IPv6 loopback in a process of its own until Ctrl-C."""
from __future__ import annotations

import http.client
import re
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

import picpac
from picpac.errors import PicPacError
from picpac.tools.explore.server import allowed_hosts, bind, is_loopback

from helpers import png

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.4", False), ("10.0.0.1", False), ("example.com", False),
    ("localhost.example.com", False), ("", False), ("127.0.0.1.nip.io", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_allowed_hosts_are_the_loopback_names_or_any():
    assert allowed_hosts("127.0.0.1") == allowed_hosts("::1") == ["127.0.0.1", "localhost", "[::1]", "::1"]
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("192.168.1.4") is None


@pytest.mark.parametrize("host, family", [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)])
def test_bind_listens_on_the_address_given(host, family):
    sock = bind(host, 0)
    try:
        assert sock.family == family and sock.getsockname()[0] == host and sock.get_inheritable()
        port = sock.getsockname()[1]
        with socket.create_connection((host, port), timeout=5):
            accepted, _ = sock.accept()
            accepted.close()
    finally:
        sock.close()


def test_a_port_in_use_is_named():
    taken = bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(PicPacError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: Address already in use$"):
            bind("127.0.0.1", port)
    finally:
        taken.close()


def test_an_address_not_of_this_machine_is_named():
    with pytest.raises(PicPacError, match=r"^cannot listen on 192\.0\.2\.1:0: Cannot assign requested address$"):
        bind("192.0.2.1", 0)  # TEST-NET-1: no machine's address


SERVE = "import sys; from picpac.tools.explore.server import serve; serve(sys.argv[1], '::1', 0, open_browser=False)"


def test_serve_on_ipv6_loopback_answers_its_bracketed_host_until_ctrl_c(tmp_path):
    db = tmp_path / "db.picpac"
    with picpac.Writer(db) as w:
        w.append(image=png(np.zeros((4, 6, 3), np.uint8)), label=1)
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        match = re.fullmatch(rf"picpac explore: serving {re.escape(str(db))} at http://\[::1\]:(\d+)/ \(Ctrl-C stops\)\n",
                             line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(match[1])
        for host, status in ((f"[::1]:{port}", 200), ("evil.example", 400)):
            conn = http.client.HTTPConnection("::1", port, timeout=30)
            conn.putrequest("GET", "/record/0", skip_host=True)
            conn.putheader("Host", host)
            conn.endheaders()
            response = conn.getresponse()
            body = response.read().decode()
            conn.close()
            assert response.status == status, body[:300]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) in (0, -signal.SIGINT)  # uvicorn raises the signal again once it stopped
        assert "warning" not in proc.stderr.read() + proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
