"""OpenAI-compatible HTTP backend: vLLM, SGLang, `transformers serve`, hosted APIs.

The path at scale: many requests in flight (an asyncio semaphore bounds them). Transport and
retries are the `openai` SDK's async client (exponential backoff with jitter on timeouts,
connection errors, 408/409/429 and 5xx); a request that still fails becomes an `EndpointError`
that names the URL and the last error, and says whether the server answered at all (`unreachable`:
no answer, e.g. a dead server; else a 5xx or a garbled answer to this one request). Other 4xx are not
retried: the request itself is wrong. In a batch, one conversation's failure does not sink the others:
`BatchEndpointError` carries the completions that came back and the error of each that did not
(kit/rollout/loop.py ends only the failed episodes, as infrastructure failures).
The request body is the kit's own (sent as is, through the SDK's raw `post`), so server-specific
fields (`top_k`, vLLM's `return_tokens_as_token_ids`) and the `n` fan-out below stay ours.

n > 1: the first request asks for n choices; a server that returns fewer (`transformers serve`
ignores `n`) gets the missing ones as separate n=1 requests, in parallel, and is remembered as
such so later calls fan out at once. With a seed, fan-out request j uses seed + j, so the
samples differ but stay reproducible.

tool_mode: "native" sends `tools` and reads `tool_calls` (vLLM/SGLang with a tool parser);
"prompt" renders tools into the system prompt and parses `<tool_call>` blocks from the text
(for servers whose template ignores tools, like SmolLM2 under `transformers serve`). In native
mode the text is still parsed, for servers that return tool calls unparsed in `content`.

API keys: `api_key` is sent as a Bearer token. Without one, the backend takes the key `kit run` gave for
its URL (`endpoint_key`): the runner puts the key of each recipe server that has one in
$KIT_ENDPOINT_KEYS (a JSON object, base URL -> key), which the stage processes it starts inherit, so a
key never travels in a stage's parameters (they are written to manifest.json and the notebooks).
`served_models` and tau2's litellm calls (kit/eval/tau2_native.py) send the same key.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from kit.errors import Unavailable
from kit.llm.capabilities import Capabilities
from kit.llm.toolcalls import new_call_id, parse_tool_calls, render_tool_call, to_prompt_messages
from kit.llm.types import (
    Backend,
    Completion,
    ChatMessage,
    SamplingParams,
    ToolCall,
    ToolSchema,
    as_params,
    normalize_tools,
    run_sync,
)

_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


class EndpointError(Unavailable):
    """The endpoint could not answer: unreachable, failing, or refusing the request (a user error:
    `kit` prints it without a traceback, see kit/errors.py). `url`: the server's base URL (with /v1);
    `unreachable`: no answer came back at all (connection refused or reset, timeout) after the retries."""

    def __init__(self, message: str, hint: str = "is the server running, and is the URL (with /v1) right? "
                 "`curl URL/models` should list the model", *, url: str | None = None, unreachable: bool = False):
        super().__init__(message, hint)
        self.url, self.unreachable = url, unreachable


class BatchEndpointError(EndpointError):
    """Some conversations of a batch failed, each after its retries. `results[i]`: conversation i's
    completions, None where it failed; `errors[i]`: why it failed. A caller that does not look inside
    sees the EndpointError of the first failure; `unreachable` when any failure got no answer."""

    def __init__(self, results: list[list[Completion] | None], errors: dict[int, EndpointError]):
        first = errors[min(errors)]
        super().__init__(f"{len(errors)} of {len(results)} requests failed; the first: {first}", first.hint,
                         url=first.url, unreachable=any(e.unreachable for e in errors.values()))
        self.results, self.errors = results, errors


class OpenAIBackend(Backend):
    """A chat-completions endpoint.

    Args:
        base_url: e.g. "http://127.0.0.1:8000/v1".
        model: the served model's name; None asks the server (`GET /models`) for its first model.
        api_key: sent as a Bearer token; default: the key `kit run` gave for `base_url` (`endpoint_key`),
            else none (a loopback server needs none).
        tool_mode: "native" or "prompt" (see the module docstring).
        max_concurrency: most requests in flight from this backend (per event loop).
        timeout: seconds per request.
        max_attempts: tries per request before `EndpointError` (1 = no retry; the SDK's backoff).
        extra_body: extra JSON fields for every request (server-specific knobs). With
            `"logprobs": true` completions carry the returned `logprobs` (caps.logprobs); with vLLM's
            `"return_tokens_as_token_ids": true` as well, also the sampled `token_ids` (caps.token_ids).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        tool_mode: str = "native",
        max_concurrency: int = 16,
        timeout: float = 120.0,
        max_attempts: int = 5,
        extra_body: dict[str, Any] | None = None,
    ):
        if tool_mode not in ("native", "prompt"):
            raise ValueError(f"OpenAIBackend tool_mode must be 'native' or 'prompt', got {tool_mode!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model or None
        self.api_key = api_key or endpoint_key(self.base_url)
        self.tool_mode = tool_mode
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.extra_body = dict(extra_body or {})
        logprobs = bool(self.extra_body.get("logprobs"))
        self.caps = Capabilities(logprobs=logprobs,
                                 token_ids=logprobs and bool(self.extra_body.get("return_tokens_as_token_ids")))
        self.server_ignores_n = False
        self.server_rejects_top_k = False  # `transformers serve` refuses the field (HTTP 422)
        self._loops: dict[asyncio.AbstractEventLoop, tuple[Any, asyncio.Semaphore]] = {}  # openai.AsyncOpenAI

    # ----- public API ---------------------------------------------------------------------

    def generate_batch(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
    ) -> list[list[Completion]]:
        async def run() -> list[list[Completion]]:
            try:
                return await self.agenerate_batch(conversations, tools, params)
            finally:
                await self.aclose()  # this loop ends with the call; so does its client

        return run_sync(run())

    async def agenerate_batch(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
    ) -> list[list[Completion]]:
        params = as_params(params)
        if params.seed is None:
            calls = (self.achat(c, tools, params) for c in conversations)
        else:
            # conversation i's choices get seeds seed + i*n + j: a seeded server would otherwise return the
            # same sample for the same prompt (a GRPO group of identical episodes)
            n = max(params.n, 1)
            calls = (self.achat(c, tools, params, seed=params.seed + i * n) for i, c in enumerate(conversations))
        got = await asyncio.gather(*calls, return_exceptions=True)
        for g in got:  # anything but an endpoint's failure is a bug: raise it as it is
            if isinstance(g, BaseException) and not isinstance(g, EndpointError):
                raise g
        errors = {i: g for i, g in enumerate(got) if isinstance(g, EndpointError)}
        if errors:
            raise BatchEndpointError([None if i in errors else g for i, g in enumerate(got)], errors)
        return list(got)

    async def achat(
        self,
        messages: list[ChatMessage],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
        **overrides: Any,
    ) -> list[Completion]:
        """`params.n` completions of one conversation; many of these may run concurrently."""
        params = as_params(params, **overrides)
        payload = await self._payload(messages, tools, params)
        out: list[Completion] = []
        sent = 0  # requests issued so far; request j gets seed + j
        while len(out) < params.n:
            missing = params.n - len(out)
            # One request for all n, unless this server is known to (or just did) return fewer.
            batch = [missing] if sent == 0 and not self.server_ignores_n else [1] * missing
            replies = await asyncio.gather(
                *(self._post(self._with_n(payload, k, params.seed, sent + j)) for j, k in enumerate(batch))
            )
            sent += len(batch)
            for want, data in zip(batch, replies):
                choices = data.get("choices") or []
                if not choices:
                    raise EndpointError(f"{self.base_url}: response has no choices: {str(data)[:300]}",
                                        url=self.base_url)
                if want > 1 and len(choices) < want:
                    self.server_ignores_n = True
                out += [self._completion(c, data.get("usage"), len(choices)) for c in choices[:want]]
        return out[: params.n]

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state:
            await state[0].close()

    def close(self) -> None:
        self._loops.clear()  # clients of finished loops die with them; nothing to await here

    # ----- requests -----------------------------------------------------------------------

    async def _payload(self, messages: list[ChatMessage], tools: list[ToolSchema] | None,
                       params: SamplingParams) -> dict:
        if self.model is None:
            self.model = await self._first_model()
        tools = normalize_tools(tools)
        if self.tool_mode == "prompt":
            msgs = to_prompt_messages(messages, tools)
        else:
            msgs = [_wire_message(m) for m in messages]
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": msgs,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.stop:
            payload["stop"] = params.stop
        if params.top_k is not None:  # not an OpenAI field: vLLM and SGLang read it (-1 = no top-k)
            if params.top_k or not self.server_rejects_top_k:
                payload["top_k"] = params.top_k or -1
        if tools and self.tool_mode == "native":
            payload["tools"] = tools
        return {**payload, **self.extra_body}

    @staticmethod
    def _with_n(payload: dict, n: int, seed: int | None, request_index: int) -> dict:
        body = {**payload, "n": n} if n > 1 else dict(payload)
        if seed is not None:
            body["seed"] = seed + request_index
        return body

    def _state(self) -> tuple[Any, asyncio.Semaphore]:
        # async clients and semaphores belong to one event loop; keep one pair per loop.
        import openai  # here, not at import time: kit.llm stays light for code that never calls an endpoint

        loop = asyncio.get_running_loop()
        if loop not in self._loops:
            for old in [lp for lp in self._loops if lp.is_closed()]:
                del self._loops[old]
            client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none", timeout=self.timeout,
                                        max_retries=self.max_attempts - 1)
            self._loops[loop] = (client, asyncio.Semaphore(self.max_concurrency))
        return self._loops[loop]

    async def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One request through the SDK (its retries included); the JSON object it returned. A garbled
        answer (not a JSON object), which the SDK does not retry, is retried here as often."""
        url = f"{self.base_url}{path}"
        for attempt in range(self.max_attempts):
            data = await self._attempt(method, path, body)
            if isinstance(data, dict):
                return data
            if attempt + 1 < self.max_attempts:
                await asyncio.sleep(min(0.5 * 2 ** attempt, 8.0))
        raise EndpointError(f"{url} failed after {self.max_attempts} attempts; last error: the response is not a "
                            f"JSON object: {str(data)[:200]!r}", url=self.base_url)

    async def _attempt(self, method: str, path: str, body: dict | None) -> Any:
        """The SDK's request (with its own retries): what the server returned, or an EndpointError."""
        import openai

        client, sem = self._state()
        url = f"{self.base_url}{path}"
        failed = f"{url} failed after {self.max_attempts} attempts; last error:"
        try:
            async with sem:
                if method == "GET":
                    return await client.get(path, cast_to=object)
                return await client.post(path, body=body, cast_to=object)
        except openai.APIStatusError as exc:
            code, text = exc.status_code, exc.response.text
            if code in (408, 409, 429) or code >= 500:  # retried by the SDK until it gave up
                raise EndpointError(f"{failed} HTTP {code}: {text[:300]}", url=self.base_url) from None
            raise EndpointError(f"{url} refused the request: HTTP {code}: {text[:500]}", url=self.base_url) from None
        except (openai.APIConnectionError, openai.APIResponseValidationError) as exc:
            cause = exc.__cause__ or exc
            raise EndpointError(f"{failed} {type(cause).__name__}: {cause}" if str(cause)
                                else f"{failed} {type(cause).__name__}", url=self.base_url,
                                unreachable=isinstance(exc, openai.APIConnectionError)) from None
        except json.JSONDecodeError as exc:  # a body labelled JSON that is not: garbled, like any non-object
            return f"{exc.doc[:200]}"

    async def _post(self, body: dict) -> dict:
        try:
            return await self._request("POST", "/chat/completions", body)
        except EndpointError as exc:
            # "no top-k" (-1) is what a server does without the field: drop it for servers that refuse
            # it (and remember); a real top-k cut such a server cannot honour stays an error
            if body.get("top_k") == -1 and "HTTP 422" in str(exc) and "top_k" in str(exc):
                self.server_rejects_top_k = True
                return await self._request("POST", "/chat/completions",
                                           {k: v for k, v in body.items() if k != "top_k"})
            raise

    async def _first_model(self) -> str:
        data = await self._request("GET", "/models")
        models = data.get("data") or []
        if not models:
            raise EndpointError(f"{self.base_url}/models lists no model; name one in the spec (url#model)",
                                url=self.base_url)
        return models[0]["id"]

    # ----- responses ----------------------------------------------------------------------

    def _completion(self, choice: dict, usage: dict | None, n_choices: int) -> Completion:
        msg = choice.get("message") or {}
        content = msg.get("content") or ""
        text, calls, errors = parse_tool_calls(content)
        rendered = []
        for tc in msg.get("tool_calls") or []:
            fn = tc.get("function") or {}
            name, args = fn.get("name") or "", fn.get("arguments")
            rendered.append(render_tool_call(name, args) if _is_object(args) else f"<tool_call>{args}</tool_call>")
            if not name:
                errors.append(f"native tool call without a function name: {json.dumps(tc)[:200]}")
            elif not _is_object(args):
                errors.append(f"tool call {name!r}: arguments are not a JSON object: {str(args)[:200]!r}")
            else:
                decoded = args if isinstance(args, dict) else json.loads(args) if args and args.strip() else {}
                calls.append(ToolCall(id=tc.get("id") or new_call_id(), name=name, arguments=decoded))
        usage = usage or {}
        return Completion(
            text=text,
            tool_calls=calls,
            raw="\n".join([content] * bool(content) + rendered),
            parse_errors=errors,
            prompt_tokens=usage.get("prompt_tokens"),
            # usage is summed over choices; a per-choice count exists only for one choice
            completion_tokens=usage.get("completion_tokens") if n_choices == 1 else None,
            finish_reason="tool_calls" if calls else choice.get("finish_reason"),
            **_sampled(choice),
        )


def _sampled(choice: dict) -> dict[str, Any]:
    """`logprobs` (and `token_ids`, when the server names tokens "token_id:<id>" as vLLM's
    `return_tokens_as_token_ids` does) from a choice's `logprobs.content`; {} when it has none."""
    entries = (choice.get("logprobs") or {}).get("content") or []
    if not entries:
        return {}
    out: dict[str, Any] = {"logprobs": [float(e["logprob"]) for e in entries]}
    tokens = [str(e.get("token", "")) for e in entries]
    if all(t.startswith("token_id:") and t[9:].isdigit() for t in tokens):
        out["token_ids"] = [int(t[9:]) for t in tokens]
    return out


def _is_object(args: Any) -> bool:
    if isinstance(args, dict):
        return True
    if args is None or (isinstance(args, str) and not args.strip()):
        return True  # no arguments
    try:
        return isinstance(json.loads(args), dict)
    except (TypeError, json.JSONDecodeError):
        return False


def _wire_message(msg: ChatMessage) -> ChatMessage:
    """OpenAI wire format: only known keys, tool-call arguments as JSON strings."""
    out = {k: msg[k] for k in _MESSAGE_KEYS if k in msg}
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {"id": tc.get("id") or new_call_id(), "type": "function",
             "function": {"name": tc["function"]["name"], "arguments": _json_str(tc["function"].get("arguments"))}}
            for tc in msg["tool_calls"]
        ]
    if out.get("content") is None and out["role"] != "assistant":
        out["content"] = ""
    return out


def _json_str(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


KEYS_ENV = "KIT_ENDPOINT_KEYS"  # JSON object: a server's base URL (with /v1) -> its API key


def _keys() -> dict[str, str]:
    try:
        keys = json.loads(os.environ.get(KEYS_ENV) or "{}")
    except ValueError:
        return {}
    return keys if isinstance(keys, dict) else {}


def endpoint_key(url: str) -> str | None:
    """The API key `kit run` gave for the server at `url` (its base URL, with /v1); None when it gave none."""
    return _keys().get(url.rstrip("/")) or None


def share_endpoint_key(url: str, key: str | None) -> None:
    """Give this process's clients, and the processes it starts from now on, the key of the server at
    `url` (kit/runner/servers.py, when it starts or reuses one); None takes it back (when it stops)."""
    keys = _keys()
    if key:
        keys[url.rstrip("/")] = key
    else:
        keys.pop(url.rstrip("/"), None)
    if keys:
        os.environ[KEYS_ENV] = json.dumps(keys)
    else:
        os.environ.pop(KEYS_ENV, None)


def bearer(key: str | None) -> dict[str, str]:
    """The Authorization header of a key; {} for none."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def served_models(url: str, timeout: float = 2.0, api_key: str | None = None) -> list[str] | None:
    """The names (and vLLM's `root` folders) GET URL/models lists; None when nothing answers 200 (a
    server with a key answers 401 without it). `api_key`: default `endpoint_key(url)`."""
    import httpx

    try:
        r = httpx.get(f"{url}/models", timeout=timeout, headers=bearer(api_key or endpoint_key(url)))
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        data = r.json().get("data") or []
    except ValueError:
        return None
    return [str(v) for m in data for v in (m.get("id"), m.get("root")) if v]
