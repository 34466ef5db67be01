"""A deterministic, OpenAI-compatible chat-completions server: the bundled offline "model".

Without an ``OPENAI_API_KEY`` the product points ``ChatOpenAI`` at this server, which plays
every DeerFlow agent (see ``offline.scripted_agents``) well enough for a real end-to-end run.
Tests use the same server with fault injection (:class:`Fault`, in ``offline.model_faults``) to
prove the workflow survives HTTP errors, timeouts, truncated bodies and bad model output. Standard
library only, so it can run anywhere the worker runs, and it binds to loopback by default.

Run it in the foreground with ``python -m offline.model_server --port 18080``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from offline.agent_text import ScriptedReply, ScriptedToolCall, text_of
from offline.json_tool_mode import action_reply, action_schema, conformed, is_action_request, native_view
from offline.loopback_http import FakeServerHandler, send_json, serve_in_thread, shut_down, wire_json
from offline.model_faults import Fault, apply_fault, requested_output_cap, runs_to_cap
from offline.scripted_agents import detect_agent, respond

MODEL_NAME = "deerflow-offline"
ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}
# What a model writes before a call when the server's grammar allows text first (tool_text "before").
PREAMBLE = "Let me think about which function fits best before I call it. "
# How long a loop without max_tokens "generates": past any test's LLM_REQUEST_TIMEOUT.
ENDLESS_SECONDS = 3600.0
STREAM_PIECE = 64  # characters per streamed content delta
PROBE_FALLBACK_CAP = 64  # tokens a rambling reply writes when the request sends no cap


def approx_tokens(text: str) -> int:
    """~4 characters per token: good enough for accounting, and needs no tokenizer download."""
    return (len(text) + 3) // 4


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        parts.append(text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(str(function.get("name", "")) + str(function.get("arguments", "")))
    return "".join(parts)


def forced_tool(body: dict[str, Any]) -> str | None:
    """The tool a request's ``tool_choice`` forces ("required": the first offered), or None."""
    choice = body.get("tool_choice")
    tools = body.get("tools") or []
    if isinstance(choice, dict):
        return str((choice.get("function") or {}).get("name") or "") or None
    if choice == "required" and tools:
        return str(tools[0]["function"]["name"])
    return None


def _arguments(raw: str) -> Any:
    """A call's arguments as the model meant them: JSON if they are (a broken call stays its text)."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeModelServer


class _Handler(FakeServerHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet by default: tests and the CLI's output should not be flooded with access logs."""
        if self.server.owner.verbose:
            super().log_message(format, *args)

    def handle(self) -> None:
        """Serve keep-alive requests; a client that hung up (its timeout fired) is not an error."""
        with contextlib.suppress(ConnectionError, TimeoutError):
            super().handle()

    def do_GET(self) -> None:
        """``/v1/models`` and ``/health`` so readiness probes and SDK model listing work."""
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            if not self.authorized():
                return
            time.sleep(self.server.owner.models_latency_seconds)
            model: dict[str, Any] = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "deerflow"}
            if self.server.owner.n_ctx:  # as llama-server reports its window
                model["meta"] = {"n_ctx": self.server.owner.n_ctx, "n_ctx_train": 8 * self.server.owner.n_ctx}
            send_json(self, 200, {"object": "list", "data": [model]})
        elif self.path.rstrip("/") in ("/health", "/healthz", ""):
            send_json(self, 200, {"status": "ok"})
        elif self.path.rstrip("/") == "/props" and self.server.owner.chat_template is not None:
            send_json(self, 200, self.server.owner.props())
        else:
            self.send_error_json(404, f"Unknown path {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self.send_error_json(404, f"Unknown path {self.path}")
            return
        if not self.authorized():
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            self.send_error_json(400, f"Request body is not JSON: {exc}")
            return
        self.server.owner._serve(self, body)

    def authorized(self) -> bool:
        """Whether the request carries the server's key, if it has one; else it is answered 401, as
        OpenAI answers a wrong key."""
        expected = self.server.owner.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self.send_error_json(401, "Incorrect API key provided.")
        return False

    def send_error_json(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        """An OpenAI-shaped error body, whose ``type``/``code`` the SDK maps to its exception classes."""
        kind, code = ERROR_TYPES.get(status, ("server_error", None if status >= 500 else "error"))
        send_json(self, status, {"error": {"message": message, "type": kind, "param": None, "code": code}},
                  headers)


class FakeModelServer:
    """The offline model on a background thread; also a context manager (start/stop)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency_seconds: float = 0.0,
                 *, ignore_tools: bool = False, n_ctx: int | None = None, piece_seconds: float = 0.0,
                 api_key: str | None = None, tool_text: str | None = None,
                 chat_template: str | None = None) -> None:
        # A key every chat request must carry, as a real provider's (None: any key, or none, will do).
        self.api_key = api_key
        self.latency_seconds = latency_seconds
        # A hosted provider's model list is a round trip away (for a new client, after a TLS handshake):
        # ``/v1/models`` answers this long after its request (bench/overhead.py --models-latency).
        self.models_latency_seconds = 0.0
        # A window, as llama-server's ``-c``: reported by /v1/models, and a longer prompt is refused.
        self.n_ctx = n_ctx
        # As llama-server does for a chat template without tool support: ``tools`` and ``tool_choice``
        # are dropped unread, so every agent answers in text, as if it had been offered none.
        self.ignore_tools = ignore_tools
        # As llama-server with a tool template whose grammar allows free text before the call (issue
        # #24): "before" writes text and then calls; "instead" (a small model) never reaches the call,
        # writing text to the output cap (finish_reason "length"), under tool_choice "required" too.
        if tool_text not in (None, "before", "instead"):
            raise ValueError(f"tool_text must be None, 'before' or 'instead', not {tool_text!r}")
        self.tool_text = tool_text
        # llama-server's ``chat_template``, served with its capabilities at ``/props`` (None: no /props).
        self.chat_template = chat_template
        # Seconds between streamed deltas: a model generating at a human-visible pace (token previews).
        self.piece_seconds = piece_seconds
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each chat request, as it came (quota drills)
        # time.monotonic() as each chat reply was sent: with ``arrivals``, the gap a worker takes from
        # one reply to its next request (bench/overhead.py's hops; in arrival order only when sequential)
        self.replies: list[float] = []
        self.verbose = False
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._counter = 0
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """What to pass as ``ChatOpenAI(base_url=...)``; known from construction (port 0 resolved)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeModelServer:
        """Serve on a daemon thread (the socket is already bound, so ``base_url`` is final)."""
        if self._thread is None:
            self._thread = serve_in_thread(self._httpd, "fake-model-server")
        return self

    def stop(self) -> None:
        """Stop serving; requests sleeping in a ``timeout`` fault or in latency wake up at once."""
        self._stopping.set()
        shut_down(self._httpd, self._thread)
        self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------ faults

    def inject(self, *faults: Fault) -> None:
        """Queue faults (FIFO); each request consumes the first one aimed at it, if any."""
        with self._lock:
            self._faults.extend(faults)

    def clear_faults(self) -> None:
        """Drop unconsumed faults, so one test's leftovers cannot break the next."""
        with self._lock:
            self._faults.clear()

    @property
    def pending_faults(self) -> list[Fault]:
        """Faults not consumed yet, e.g. to assert a targeted fault actually fired."""
        with self._lock:
            return list(self._faults)

    def requests_for(self, agent: str) -> list[dict[str, Any]]:
        """The request bodies received for one DeerFlow agent, recognised as the fake itself does."""
        with self._lock:
            received = list(self.requests)
        return [body for body in received
                if detect_agent(native_view(body) if is_action_request(body) else body) == agent]

    def props(self) -> dict[str, Any]:
        """llama-server's ``/props``, in the parts the worker reads: the template and its capabilities."""
        tools = not self.ignore_tools
        return {"chat_template": self.chat_template, "model_path": f"/models/{MODEL_NAME}.gguf",
                "chat_template_caps": {"supports_tools": tools, "supports_tool_calls": tools,
                                       "supports_system_role": True}, "build_info": "fake"}

    def _take_fault(self, agent: str | None) -> Fault | None:
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault.agent is None or fault.agent == agent:
                    return self._faults.pop(i)
        return None

    # ------------------------------------------------------------ serving

    def _serve(self, handler: _Handler, body: dict[str, Any]) -> None:
        """Answer one chat request ``latency_seconds`` after it arrived.

        The answer is worked out first and sent once the latency has passed since the arrival, so
        a request's reply leaves exactly that long after it came, however long this fake takes to
        read a long prompt or build its reply: bench/overhead.py divides by that latency alone, and
        the fake's own work is not the worker's overhead.
        """
        with self._lock:
            arrival = time.monotonic()
            self.arrivals.append(arrival)
            self.requests.append(body)
            self._counter += 1
            number = self._counter
        answer = self._answer(handler, body, number)
        self._stopping.wait(max(0.0, arrival + self.latency_seconds - time.monotonic()))
        self.replies.append(time.monotonic())  # before it leaves: a client that has it finds it recorded
        answer()

    def _answer(self, handler: _Handler, body: dict[str, Any], number: int) -> Callable[[], None]:
        """What to send for ``body``: worked out now, sent when the caller calls it."""
        if self.ignore_tools:
            body = {key: value for key, value in body.items() if key not in ("tools", "tool_choice")}
        schema = action_schema(body) if is_action_request(body) else None
        if schema is not None:  # the model reads the JSON-mode request as its tools and conversation
            body = native_view(body)
        agent = detect_agent(body)
        fault = self._take_fault(agent)
        if fault is not None and fault.kind == "status":
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            message = fault.message or f"Injected fault: HTTP {fault.status_code}"
            return functools.partial(handler.send_error_json, fault.status_code, message, headers)
        prompt_tokens = approx_tokens(_prompt_text(body.get("messages") or []) + json.dumps(body.get("tools") or []))
        window = fault.n_ctx if fault is not None and fault.kind == "context_overflow" else self.n_ctx
        if window and (prompt_tokens > window or (fault is not None and fault.kind == "context_overflow")):
            return functools.partial(send_json, handler, 400, {"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt_tokens, "n_ctx": window,
                "message": "the request exceeds the available context size, try increasing it"}})
        if fault is not None and fault.kind == "loop" and requested_output_cap(body) is None:
            return functools.partial(self._generate_for_ever, handler)
        try:
            if fault is not None and fault.kind == "no_tool_call":
                reply = respond({key: value for key, value in body.items() if key != "tools"}, agent)
            else:
                reply = respond(body, agent)
        except Exception as exc:  # a bug in a scripted agent should read as a server error, not a hang
            traceback.print_exc(file=sys.stderr)
            return functools.partial(handler.send_error_json, 500, f"Offline model failed: {exc!r}")
        content, calls, rambles = self._shaped(reply, body, fault, schema)
        completion = self._completion(number, body, content, calls)
        if rambles or runs_to_cap(fault, content, body):
            completion["choices"][0]["finish_reason"] = "length"
        if body.get("stream"):
            send = functools.partial(self._send_stream, handler, completion, body,
                                     cut=fault is not None and fault.kind == "truncated")
        elif fault is not None and fault.kind == "truncated":
            send = functools.partial(self._send_truncated, handler, completion)
        else:
            send = functools.partial(send_json, handler, 200, completion)
        if fault is not None and fault.kind == "timeout":
            return functools.partial(self._late, handler, fault.seconds, send)
        return send

    def _generate_for_ever(self, handler: _Handler) -> None:
        """The ``loop`` fault: the model generates until the client hangs up (or the server stops)."""
        self._stopping.wait(ENDLESS_SECONDS)
        handler.close_connection = True

    def _late(self, handler: _Handler, seconds: float, send: Callable[[], None]) -> None:
        """The ``timeout`` fault: the reply comes ``seconds`` late, to a client that has most likely
        hung up by now."""
        self._stopping.wait(seconds)
        handler.close_connection = True
        send()

    def _shaped(self, reply: ScriptedReply, body: dict[str, Any], fault: Fault | None,
                schema: dict[str, Any] | None) -> tuple[str, list[tuple[str, str, str]], bool]:
        """The agent's reply as this server lets the model write it: a forced call made, text before
        or instead of a call (``tool_text``), the fault applied, one action object in JSON tool mode
        (``schema``: the action's, None for a native request) as the schema allows it; and whether the
        model rambled to its cap instead of calling."""
        content, calls = reply.content, [(c.id, c.name, json.dumps(c.arguments, ensure_ascii=False))
                                         for c in reply.tool_calls]
        forced = forced_tool(body)
        if forced is not None and not calls:  # the server's grammar makes the model call it
            content, calls = "", [("call_forced", forced, "{}")]
        native_calls = bool(calls) and schema is None  # a JSON-mode reply is no tool call to the server
        rambles = native_calls and self.tool_text == "instead"
        if rambles:  # the model never reaches the call the grammar allows after free text
            cap = requested_output_cap(body) or PROBE_FALLBACK_CAP
            content, calls = (PREAMBLE * (cap * 4 // len(PREAMBLE) + 1))[:cap * 4], []
        elif native_calls and self.tool_text == "before":
            content = PREAMBLE
        if fault is not None:
            content, calls = apply_fault(fault, reply, content, calls, body)
        if schema is not None and not (fault and fault.kind == "reply"):  # the schema allows one action object
            content, calls = action_reply(conformed(ScriptedReply(content, tuple(
                ScriptedToolCall(cid, name, _arguments(args)) for cid, name, args in calls)), schema)), []
        return content, calls, rambles

    @staticmethod
    def _completion(number: int, body: dict[str, Any], content: str,
                    calls: list[tuple[str, str, str]]) -> dict[str, Any]:
        prompt_tokens = approx_tokens(_prompt_text(body.get("messages") or []))
        completion_tokens = approx_tokens(content + "".join(name + args for _, name, args in calls))
        message: dict[str, Any] = {"role": "assistant", "content": (content or None) if calls else content,
                                   "refusal": None}
        if calls:
            message["tool_calls"] = [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": args}}
                                     for cid, name, args in calls]
        return {
            "id": f"chatcmpl-offline-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_NAME,
            "system_fingerprint": "fp_deerflow_offline",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    @staticmethod
    def _send_truncated(handler: _Handler, completion: dict[str, Any]) -> None:
        data = json.dumps(completion).encode()
        cut = data[: max(1, len(data) // 2)]
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data) + 100))
        handler.end_headers()
        handler.wfile.write(cut)
        handler.wfile.flush()
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def _send_stream(self, handler: _Handler, completion: dict[str, Any], body: dict[str, Any], cut: bool) -> None:
        """SSE in HTTP/1.1 chunked encoding: role, content/tool-call deltas, finish, usage, [DONE].

        ``cut`` (the ``truncated`` fault on a streamed call) hangs up halfway through the deltas.
        """
        choice = completion["choices"][0]
        message = choice["message"]
        base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}]}

        events = [chunk({"role": "assistant", "content": "" if not message.get("tool_calls") else None})]
        content = message.get("content") or ""
        events += [chunk({"content": content[i:i + STREAM_PIECE]})
                   for i in range(0, len(content), STREAM_PIECE)]
        for index, call in enumerate(message.get("tool_calls") or []):
            events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                 "function": {"name": call["function"]["name"],
                                                              "arguments": ""}}]}))
            args = call["function"]["arguments"]
            events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 32]}}]})
                       for i in range(0, len(args), 32)]
        events.append(chunk({}, choice["finish_reason"]))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**base, "choices": [], "usage": completion["usage"]})
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        lines = [f"data: {wire_json(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]
        for number, line in enumerate(lines):
            if cut and number == len(lines) // 2:
                handler.close_connection = True
                with contextlib.suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if number and self.piece_seconds > 0:
                self._stopping.wait(self.piece_seconds)
            data = line.encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()


def main(argv: list[str] | None = None) -> None:
    """Foreground mode, for pointing any OpenAI-compatible client at the offline model."""
    parser = argparse.ArgumentParser(description="DeerFlow's deterministic offline model server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to sleep before each answer")
    parser.add_argument("--piece-latency", type=float, default=0.0, help="seconds between streamed deltas")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument("--ignore-tools", action="store_true", help="drop tools, as llama-server for a template "
                        "without tool support")
    parser.add_argument("--tool-text", choices=("before", "instead"), help="text before a call, or instead of it")
    args = parser.parse_args(argv)
    server = FakeModelServer(args.host, args.port, args.latency, piece_seconds=args.piece_latency,
                             ignore_tools=args.ignore_tools, tool_text=args.tool_text)
    server.verbose = args.verbose
    print(server.base_url, flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()

