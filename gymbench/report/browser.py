"""Load a report in headless Chromium and say what a person would see: did it load, which images
are broken, which scripts failed, the visible text, and a full-page screenshot.

Parsing the HTML and decoding its images (what the report tests did before) cannot see what a
browser does with the page: a PNG that decodes but does not display, a script that throws, a
section the layout hides. This drives a real browser over the Chrome DevTools Protocol, with no
package beyond aiohttp: Chromium is started on 127.0.0.1 with ``--remote-debugging-port=0``, the
port is read from the line it prints on stderr, a page is opened with ``PUT /json/new`` and driven
over its websocket. Every wait has a deadline, and the browser is killed (its whole process group)
whatever happens.

Chromium comes from the system (Debian: ``apt-get install -y chromium``), or from
``GYMBENCH_CHROMIUM``; it is given none of gymbench's environment beyond what a child process needs
(no API key), the same rule the real engine's server follows.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from gymbench.builtin.backend_settings import HttpSettings
from gymbench.builtin.http_client import RetryingClient
from gymbench.engine.server import server_environment
from gymbench.errors import GymbenchError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_ENV = "GYMBENCH_CHROMIUM"
INSTALL_HINT = "apt-get install -y chromium"
WINDOW = (1280, 900)
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--no-default-browser-check", "--hide-scrollbars", "--remote-debugging-address=127.0.0.1",
                  "--remote-debugging-port=0")  # fmt: skip
"""No sandbox: CI runs as root, where Chromium's sandbox refuses to start. No /dev/shm: a container's
is often 64 MiB, too small for a long page. Port 0: the system picks a free one, read from stderr."""
MAX_SCREENSHOT_HEIGHT = 16000
"""Chromium's largest texture is 16384 px a side; a longer page is cut there, not failed."""
DEVTOOLS_LINE = re.compile(r"DevTools listening on (ws://127\.0\.0\.1:(\d+)/\S+)")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""A full-page screenshot comes back as one base64 message; aiohttp's default cap is 4 MiB."""

PAGE_STATE = """
(async () => {
  const images = [...document.images];
  for (const image of images) image.loading = "eager";
  const settled = image => image.complete ? null : new Promise(done => {
    image.addEventListener("load", done, {once: true});
    image.addEventListener("error", done, {once: true});
  });
  await Promise.race([Promise.all(images.map(settled)), new Promise(done => setTimeout(done, 10000))]);
  return {
    href: location.href,
    ready: document.readyState,
    title: document.title,
    images: images.length,
    broken: images.filter(i => !i.complete || i.naturalWidth === 0).map(i => (i.alt || i.src).slice(0, 120)),
    headings: [...document.querySelectorAll("h1, h2, h3")].map(h => h.innerText.trim()).filter(Boolean),
    scripts: document.scripts.length,
    text: document.body ? document.body.innerText : "",
  };
})()
"""
"""What the checks read from the page. Images are made eager and given up to 10 s to settle, so a
lazily loaded image below the fold counts by whether it would show, not by where it sits."""


@dataclass(frozen=True)
class PageCheck:
    """What a headless browser saw of one page."""

    url: str
    loaded: bool
    title: str
    images: int
    broken_images: list[str]
    """Each broken image's alt text (or the start of its source)."""
    headings: list[str]
    """The text of every ``h1``-``h3``, in page order."""
    scripts: int
    script_errors: list[str]
    """Uncaught exceptions, ``console.error`` calls and the browser's own error log entries."""
    text: str
    """``document.body.innerText``: the visible text (not what a closed ``<details>`` holds)."""
    screenshot: Path | None = None
    load_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.loaded and not self.broken_images and not self.script_errors


def find_chromium() -> str:
    """``GYMBENCH_CHROMIUM`` if set, else the first of :data:`CHROMIUM_NAMES` on ``PATH``."""
    chosen = os.environ.get(CHROMIUM_ENV)
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise GymbenchError(
                f"{CHROMIUM_ENV}={chosen} is not an executable; point it at a Chromium or Chrome binary"
            )
        return found
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise GymbenchError(
        f"no headless browser found (looked for {', '.join(CHROMIUM_NAMES)} on PATH and ${CHROMIUM_ENV}); "
        f"install one: {INSTALL_HINT}"
    )


def check_page(page: Path, screenshot: Path | None = None, *, timeout_s: float = 90.0) -> PageCheck:
    """Load ``page`` (a local HTML file) in headless Chromium and check it; with ``screenshot``,
    save a full-page PNG there. Raises :class:`GymbenchError` with one line when the file is
    missing, no browser is installed, or the browser does not answer within ``timeout_s``."""
    page = Path(page).resolve()
    if not page.is_file():
        raise GymbenchError(f"{page}: no such file; pass the HTML report to load")
    binary = find_chromium()
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="gymbench-chromium-", ignore_cleanup_errors=True) as scratch:
        browser = _start(binary, Path(scratch))
        try:
            port = _devtools_port(browser, Path(scratch) / "stderr.log", deadline)
            drive = _inspect(port, page.as_uri(), screenshot)
            return asyncio.run(asyncio.wait_for(drive, max(1.0, deadline - time.monotonic())))
        except asyncio.TimeoutError:
            raise GymbenchError(f"headless chromium did not finish loading {page} within {timeout_s:g} s") from None
        finally:
            _stop(browser)


def _start(binary: str, scratch: Path) -> subprocess.Popen[bytes]:
    """Chromium in its own process group (its helpers die with it), its stderr in a file (a pipe
    nobody reads could fill and stall it)."""
    command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={scratch}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
               "about:blank"]  # fmt: skip
    with open(scratch / "stderr.log", "wb") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                env=server_environment(), start_new_session=True)  # fmt: skip


def _devtools_port(browser: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    """The port from Chromium's ``DevTools listening on ws://127.0.0.1:PORT/...`` line."""
    while time.monotonic() < deadline:
        found = DEVTOOLS_LINE.search(log.read_text(errors="replace"))
        if found:
            return int(found.group(2))
        if browser.poll() is not None:
            raise GymbenchError(f"headless chromium exited with status {browser.returncode} before it listened; "
                                f"its last lines: {_tail(log)}")  # fmt: skip
        time.sleep(0.05)
    raise GymbenchError(f"headless chromium did not open its DevTools port in time; its last lines: {_tail(log)}")


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-5:]) or "(nothing)"


def _stop(browser: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(browser.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        browser.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass  # left to init: the group was sent SIGKILL, which cannot be caught


async def _inspect(port: int, url: str, screenshot: Path | None) -> PageCheck:
    """Open a page target, load ``url`` and read it, over gymbench's one HTTP client session."""
    settings = HttpSettings(request_timeout_s=60.0, max_retries=0, preflight=False)
    client = RetryingClient(settings, "headless chromium")
    client.headers = {}  # the local browser is no model server: no Authorization header for it
    await client.open(None)
    assert client.session is not None
    try:
        async with client.session.put(f"http://127.0.0.1:{port}/json/new?about:blank") as answer:
            target = json.loads(await answer.text())
        async with client.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=MAX_MESSAGE_BYTES) as ws:
            return await DevToolsPage(ws).check(url, screenshot)
    finally:
        await client.close()


@dataclass
class DevToolsPage:
    """One page target spoken to over CDP: commands answered by id; events kept as they arrive."""

    ws: aiohttp.ClientWebSocketResponse[bool]
    events: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self._receive()
            if message.get("id") == ident:
                if "error" in message:
                    raise GymbenchError(f"headless chromium refused {method}: {message['error'].get('message')}")
                return dict(message.get("result", {}))

    async def wait_for(self, event: str) -> None:
        while not any(seen.get("method") == event for seen in self.events):
            await self._receive()

    async def _receive(self) -> dict[str, Any]:
        message = await self.ws.receive()
        if message.type != aiohttp.WSMsgType.TEXT:
            raise GymbenchError(f"headless chromium closed its DevTools connection ({message.type.name})")
        decoded: dict[str, Any] = json.loads(message.data)
        if "method" in decoded:
            self.events.append(decoded)
        return decoded

    async def check(self, url: str, screenshot: Path | None) -> PageCheck:
        for domain in ("Page", "Runtime", "Log"):
            await self.call(f"{domain}.enable")
        navigated = await self.call("Page.navigate", url=url)
        if navigated.get("errorText"):
            return PageCheck(url, False, "", 0, [], [], 0, self.errors(), "", load_error=navigated["errorText"])
        await self.wait_for("Page.loadEventFired")
        state = await self.call("Runtime.evaluate", expression=PAGE_STATE, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in state:
            raise GymbenchError(f"reading the page failed in the browser: {state['exceptionDetails'].get('text')}")
        value = state["result"]["value"]
        loaded = value["ready"] == "complete" and value["href"] == url
        shot = await self.capture(screenshot) if screenshot is not None else None
        return PageCheck(
            url=url,
            loaded=loaded,
            title=value["title"],
            images=value["images"],
            broken_images=list(value["broken"]),
            headings=list(value["headings"]),
            scripts=value["scripts"],
            script_errors=self.errors(),
            text=value["text"],
            screenshot=shot,
        )

    def errors(self) -> list[str]:
        """Uncaught exceptions, ``console.error`` and error entries of the browser's log, in order."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"{params['entry'].get('source', 'log')}: {params['entry'].get('text', '')}")
        return found

    async def capture(self, screenshot: Path) -> Path:
        """The whole page, not the window: clipped to the content's size (cut at
        :data:`MAX_SCREENSHOT_HEIGHT`), rendered beyond the viewport."""
        size = (await self.call("Page.getLayoutMetrics"))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": max(size["width"], WINDOW[0]),
                "height": min(max(size["height"], 1), MAX_SCREENSHOT_HEIGHT), "scale": 1}  # fmt: skip
        shot = await self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        return screenshot
