"""Debian's chromium, headless, driven over the DevTools protocol, and a directory served
over HTTP on 127.0.0.1: what the tests that open the built site in a real browser share."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TIMEOUT_S = 30.0
SLOW_TIMEOUT_S = 120.0
"""For a wait that a loaded host can stretch (a fresh load that draws every chart): long
enough for a busy machine, still finite; a condition met sooner ends the wait sooner."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CDP:
    """A minimal Chrome DevTools Protocol session on one page target."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        # a reply waited for here can be slow on a loaded host (a navigation, a page's
        # scripts): the waits below bound what a test waits for
        self.ws = websocket.create_connection(ws_url, timeout=SLOW_TIMEOUT_S, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float = TIMEOUT_S) -> Any:
        """The value of ``expression`` once it is truthy, asked again every 0.1 s until
        ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page is navigating (a reload): ask again
                if "navigated" not in str(exc) and "context" not in str(exc):
                    raise
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what} ({timeout_s:.0f} s)")

    def errors(self) -> list[str]:
        out = []
        for ev in self.events:
            method, params = ev["method"], ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(f"console.error: {[a.get('value', a.get('description')) for a in params.get('args', [])]}")
            elif method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                out.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return out


@contextlib.contextmanager
def serve(directory: Path, port: int) -> Iterator[None]:
    """``directory`` over HTTP on 127.0.0.1:``port`` while the block runs."""
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait(timeout=10)


@contextlib.contextmanager
def chromium(executable: str, profile: Path) -> Iterator[CDP]:
    """Headless chromium with a fresh ``profile``, driven over DevTools on its first page."""
    proc = subprocess.Popen(
        [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cdp: CDP | None = None
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT_S
        while not (active.is_file() and active.read_text().strip()):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(active.read_text().split()[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
        conn.request("GET", "/json/list")
        targets = json.loads(conn.getresponse().read())
        conn.close()
        page = next(t for t in targets if t.get("type") == "page")
        cdp = CDP(page["webSocketDebuggerUrl"])
        yield cdp
    finally:
        if cdp is not None:
            cdp.ws.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
