"""A small Chrome DevTools Protocol client: headless Debian Chromium driven over its websocket.

Why not Playwright or Selenium: both download browsers or drivers at install time, which a
machine without internet cannot do. The distribution's ``chromium`` plus ``websockets`` (already
installed with langsmith) is enough to load a page, click, type and take screenshots.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import websockets

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-extensions", "--no-first-run",
    "--no-default-browser-check", "--mute-audio", "--window-size=1400,1000",
)
# The two widths every page point is tried at: a laptop, and a phone held upright.
DESKTOP = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
WIDTHS = {1280: DESKTOP, 390: PHONE}
# A loaded 2-core CI machine can take many seconds to answer the first command of a cold browser.
CDP_REPLY_SECONDS = 45
# Our page's request for a run's status (GET /api/runs/ID), as a JavaScript pattern, for the tests
# that hold, count or fail it in the page's fetch.
STATUS_REQUEST = r"/^\/api\/runs\/[^/?]+$/"


def chromium_path() -> str | None:
    """The system Chromium (Debian's package), if installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


def off_screen(selectors: str) -> str:
    """A script for :meth:`Page.evaluate`: the visible elements ``selectors`` finds that stand wider
    than the screen or off its edges, and the page itself when it is wider ([] when none is)."""
    return ("[...document.querySelectorAll('" + selectors + "')]\n"
            "  .filter((e) => e.offsetParent !== null)\n"
            "  .map((e) => [e.id || e.tagName, e.getBoundingClientRect()])\n"
            "  .filter(([, b]) => b.left < -0.5 || b.right > innerWidth + 0.5)\n"
            "  .map(([name, b]) => `${name}: ${b.left}..${b.right}`)\n"
            "  .concat(document.documentElement.scrollWidth > innerWidth"
            " ? [`page: ${document.documentElement.scrollWidth}`] : [])")


class CDPError(RuntimeError):
    pass


class Session:
    """A DevTools session over its own websocket: the browser's, or one page's (:class:`Page`)."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.console: list[str] = []  # console messages and uncaught errors, for failure reports
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self._socket:
            message = json.loads(raw)
            future = self._pending.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)
            elif message.get("method") == "Runtime.consoleAPICalled":
                args = message["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                self.console.append(f"uncaught: {details.get('exception', {}).get('description') or details}")

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        await self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        try:
            reply = await asyncio.wait_for(future, CDP_REPLY_SECONDS)
        except TimeoutError:
            raise CDPError(f"{method}: chromium sent no reply in {CDP_REPLY_SECONDS} s") from None
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        await self._socket.close()


class Page(Session):
    """One page target: load, read, click, type and take screenshots."""

    async def evaluate(self, expression: str) -> Any:
        """Run JavaScript in the page and return its (JSON-able) value; promises are awaited."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise CDPError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 20.0, what: str | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what or expression}")
            await asyncio.sleep(0.2)

    async def use_width(self, width: int) -> None:
        """Lay the page out as a browser ``width`` CSS pixels wide would (one of ``WIDTHS``)."""
        await self.send("Emulation.setDeviceMetricsOverride", **WIDTHS[width])

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'", what=f"{url} to load")

    async def open_until(self, url: str, expression: str, timeout: float, what: str, reload_every: float = 30.0) -> Any:
        """Load ``url`` until ``expression`` holds, loading it again every ``reload_every`` seconds.

        For Temporal's Web UI, which asks the API and the codec server once per load and never
        again: a request that timed out on a loaded machine leaves that load without the payloads,
        and a person would reload. A TimeoutError still names what never showed, with the page's text."""
        deadline = time.monotonic() + timeout
        while True:
            await self.navigate(url)
            remaining = deadline - time.monotonic()
            try:
                return await self.wait_for(expression, min(reload_every, max(remaining, 0.0)), what=what)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    text = await self.evaluate("document.body ? document.body.innerText : ''")
                    raise TimeoutError(f"timed out waiting for {what}; the page showed: {str(text)[:1500]!r}") from None

    async def insert_text(self, text: str) -> None:
        """Type into the focused element as a keyboard would (works for editors like CodeMirror)."""
        await self.send("Input.insertText", text=text)

    async def click_at(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    async def press(self, selector: str) -> None:
        """A real mouse click at the element's centre, once it is visible, on top, and has stayed in
        place for two polls: a banner or list that appears late moves what was measured, and the
        click would land on something else (seen in CI on a loaded host)."""
        box = await self.wait_for(
            f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e || e.offsetParent === null) return null; e.scrollIntoView({{block: 'center'}});
            const b = e.getBoundingClientRect(); const x = b.x + b.width / 2, y = b.y + b.height / 2;
            const hit = document.elementFromPoint(x, y);
            if (!hit || !(hit === e || e.contains(hit) || (e.labels && [...e.labels].includes(hit)))) return null;
            const at = `${{x}},${{y}}`; if (window.__pressAt !== at) {{ window.__pressAt = at; return null; }}
            return [x, y]; }})()""",
            what=selector)
        await self.click_at(*box)

    async def type_into(self, selector: str, text: str) -> None:
        await self.press(selector)
        await self.insert_text(text)

    async def screenshot(self, path: Path) -> Path:
        data = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
        return path


class Chromium:
    """Headless Chromium with remote debugging on a port it picks itself (no port race).

    One browser serves a test process's pages (the ``page`` fixture in tests/conftest.py): starting
    one costs seconds of CPU on a loaded machine, and each page gets a browser context of its own
    (:func:`open_page`), which shares no cookies, storage or cache with any other, as a fresh browser
    would not either. A browser that died is started again by the next page.
    """

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self._profile = tempfile.TemporaryDirectory(prefix="cdp-profile-", ignore_cleanup_errors=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> Chromium:
        profile = Path(self._profile.name)
        active_port = profile / "DevToolsActivePort"
        active_port.unlink(missing_ok=True)  # a browser that died left its port here: wait for the new one's
        self.process = subprocess.Popen(
            [self.executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while not (active_port.is_file() and active_port.read_text().strip()):
            if self.process.poll() is not None:
                raise CDPError(f"chromium exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise CDPError("chromium did not open its DevTools port")
            time.sleep(0.1)
        self.port = int(active_port.read_text().splitlines()[0])
        return self

    def running(self) -> Chromium:
        """This browser, started if it is not running (first use, or it died)."""
        return self if self.process is not None and self.process.poll() is None else self.start()

    async def _socket(self, path: str) -> Any:
        return await websockets.connect(f"ws://127.0.0.1:{self.port}{path}", max_size=64 * 1024 * 1024)

    async def browser_session(self) -> Session:
        """A session with the browser itself (contexts and targets), on the running event loop."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/version", timeout=10) as response:
            path = urllib.parse.urlsplit(json.load(response)["webSocketDebuggerUrl"]).path
        return Session(await self._socket(path))

    async def page_in(self, browser: Session, context_id: str) -> Page:
        """A new blank page in the browser context ``context_id``."""
        target = await browser.send("Target.createTarget", url="about:blank", browserContextId=context_id)
        page = Page(await self._socket(f"/devtools/page/{target['targetId']}"))
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        return page

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            # The whole group: Chromium's renderer and GPU helpers are its children.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
        self._profile.cleanup()


@contextlib.asynccontextmanager
async def open_page(chromium: Chromium) -> AsyncIterator[Page]:
    """A page of ``chromium`` in a browser context of its own, disposed of (with the page) at the end."""
    browser = await chromium.running().browser_session()
    try:
        context_id = (await browser.send("Target.createBrowserContext"))["browserContextId"]
        try:
            page = await chromium.page_in(browser, context_id)
            try:
                yield page
            finally:
                await page.close()
        finally:
            with contextlib.suppress(CDPError):
                await browser.send("Target.disposeBrowserContext", browserContextId=context_id)
    finally:
        await browser.close()
