"""The HTTP server: a FastAPI app over the models loaded from the command line (`create_app`). It reaches every task
through the task interface (`Task.serves` and the methods it names), never by a task's name.

    GET    /v1/health                     alive: the number of models and of live sessions
    GET    /v1/models                     what is loaded: task, model, labels, backbone, the scores it came with; the most turns a request takes
    POST   /v1/sessions                   a conversation annotated one utterance at a time: {"models": [...]}
    POST   /v1/sessions/{id}/utterances   {"speaker", "text"} -> each model's label and probabilities for it
    GET    /v1/sessions/{id}              the whole annotated history
    DELETE /v1/sessions/{id}
    POST   /v1/annotate                   a whole conversation labelled in one request (each model's one-pass path)
    POST   /v1/rank                       candidate replies scored and ranked
    POST   /v1/generate                   a reply generated
    POST   /v1/attention                  what each DialogXL head type attends to from one utterance
    GET    /                              the web page; /docs the OpenAPI page, /openapi.json its schema

Bad input is a 4xx whose JSON body's "error" names the field, never a 500; a session that is gone is a 410 saying
why. The endpoints are plain functions, which FastAPI runs in its thread pool, and every model call holds its
model's lock, so requests for different models run side by side and those for one model wait their turn.
"""

from __future__ import annotations

import asyncio
import codecs
import hmac
import json
import logging
from pathlib import Path
from typing import Any, Sequence

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from turnformer import __version__
from turnformer.data._io import DuplicateKeyError, duplicate_key_at
from turnformer.data.jsonl import read_json
from turnformer.dialogue import DialogueError, next_speaker
from turnformer.serve.models import LoadedModel, ModelBusy, pick_model, pick_models
from turnformer.serve.schemas import (AnnotateIn, AttentionIn, GenerateIn, Limits, NewSession, RankIn, UtteranceIn, candidate_turns,
                                      checked_speaker, checked_turn, conversation, ignored_fields)
from turnformer.serve.sessions import SessionFull, SessionGone, SessionStore
from turnformer.tasks.base import ANNOTATE, ATTENTION, GENERATE, RANK, STREAM

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


class JSONAnswer(JSONResponse):
    """Strict JSON (no NaN), with an unpaired surrogate that a client sent, and an error message repeats, escaped
    rather than failing the response."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def error(status: int, message: str, headers: dict | None = None, **extra: Any) -> JSONAnswer:
    return JSONAnswer({"error": message, **extra}, status_code=status, headers=headers)


class StrictJSONRequest(Request):
    """A request whose JSON body is read as conversation files are (`read_json`): a key twice in one object, NaN or
    Infinity is refused, where Python's reader keeps the last value and reads the constants."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            encoding = self.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ValueError(f"a body in Content-Encoding {encoding} is not read: send the JSON uncompressed")
            text = utf8_text(await self.body())
            try:
                self._json = read_json(text)
            except DuplicateKeyError as err:  # which of the body's objects: where the key's second value starts
                at = duplicate_key_at(text)
                raise DuplicateKeyError(f"{err}; its second value at line {at[0]}, column {at[1]}" if at else str(err)) from None
        return self._json


def utf8_text(body: bytes) -> str:
    """A request body as UTF-8 text (a byte-order mark read past); one in UTF-16 or UTF-32, which Python's JSON reader
    would decode by its first bytes, refused as not UTF-8 (JSON between systems is UTF-8), naming what it is."""
    if body[:2] == b"\x1f\x8b":
        raise ValueError("a gzip-compressed body is not read: send the JSON uncompressed")
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or (len(body) > 1 and (body[0] == 0) != (body[1] == 0)):
        raise ValueError("not UTF-8 text (UTF-16 or UTF-32, by its first bytes); send JSON in UTF-8")
    return body.decode("utf-8-sig")


class StrictJSONRoute(APIRoute):
    """An endpoint that reads its body as a `StrictJSONRequest`."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


class BodyLimit:
    """Refuse a request body over `max_bytes` (413) before anything parses it: by its Content-Length where it gives
    one, else by counting as it arrives (read whole here, at most `max_bytes`, then handed on); and one that has not
    all arrived `seconds` after the request began (408), so that a client that stops half-way does not hold its
    connection open."""

    def __init__(self, app, max_bytes: int, seconds: float):
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self.too_large(scope, receive, send)
        chunks, size, more = [], 0, True
        deadline = asyncio.get_running_loop().time() + self.seconds
        while more:
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                return await error(408, f"request body not complete within {self.seconds:g} s (Content-Length larger "
                                        "than the body sent?)", headers={"Connection": "close"})(scope, receive, send)
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self.too_large(scope, receive, send)
            more = message.get("more_body", False)
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        handed = False

        async def replay():
            nonlocal handed
            if handed:
                return await receive()
            handed = True
            return whole

        await self.app(scope, replay, send)

    async def too_large(self, scope, receive, send) -> None:
        await error(413, f"request body over {self.max_bytes} bytes, the most this server takes: send fewer turns (the "
                         "newest), or shorter texts")(scope, receive, send)


def field_of(location: tuple) -> str:
    """A validation error's place as a client writes it: ("body", "turns", 3, "text") -> "turns[3].text"."""
    parts = location[1:] if location and location[0] in ("body", "path", "query") else location
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name or "body"


def problem(e: dict) -> dict:
    if e["type"] == "json_invalid":  # its location is the character where parsing failed
        return {"field": "body", "message": f"not valid JSON ({e.get('ctx', {}).get('error', e['msg'])}: character "
                                            f"{e['loc'][-1]})"}
    return {"field": field_of(tuple(e["loc"])), "message": e["msg"]}


def unreadable(cause: BaseException) -> str:
    """Why a request body could not be read as JSON, where FastAPI says only that it could not."""
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8 text (byte {cause.start}: {cause.reason}); send JSON in UTF-8"
    if isinstance(cause, RecursionError):
        return "nested too deeply to read"
    if isinstance(cause, ValueError):  # `read_json`'s refusals: a key twice, NaN, a number too long
        return str(cause)
    return f"cannot be read as JSON ({type(cause).__name__})"


MAX_PROBLEMS = 20  # the problems a 422 answer lists


def add_error_handlers(app: FastAPI) -> None:
    async def invalid(request, exc: RequestValidationError):
        problems = [problem(e) for e in exc.errors()]
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if problems[0]["field"] == "body" and media != "application/json":  # FastAPI reads a body as JSON only if it says so
            problems[0]["message"] += (f"; the request's Content-Type is {media or 'missing'}: send the body as JSON with "
                                       "Content-Type: application/json")
        more = f" (and {len(problems) - 1} more: see problems)" if len(problems) > 1 else ""
        if len(problems) > MAX_PROBLEMS:  # a list of a million wrong items: its first problems, not a 50 MB answer
            more = f" (and {len(problems) - 1} more: the first {MAX_PROBLEMS} in problems)"
        # a body that is not JSON: 400, as one read as JSON and refused (`unreadable`); JSON of the wrong shape: 422
        status = 400 if exc.errors()[0]["type"] == "json_invalid" else 422
        return error(status, f"{problems[0]['field']}: {problems[0]['message']}{more}", problems=problems[:MAX_PROBLEMS])

    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not read the body: say why
            return error(400, f"body: {unreadable(exc.__cause__)}")
        path = request.url.path
        if exc.status_code == 404 and len(path) > 1 and path.endswith("/"):  # no redirect: a POST would lose its body
            return error(404, f"Not Found: {path} (the endpoints are written without a final '/': {path.rstrip('/')})")
        return error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    async def bad_input(_, exc: DialogueError):
        return error(422, str(exc))

    async def gone(_, exc: SessionGone):
        return error(404 if exc.reason == "unknown" else 410, str(exc), session=exc.session_id, reason=exc.reason)

    async def full(_, exc: SessionFull):
        return error(409, str(exc))

    async def busy(_, exc: ModelBusy):
        return error(503, str(exc), headers={"Retry-After": "1"})

    for kind, handler in ((RequestValidationError, invalid), (StarletteHTTPException, http_error), (DialogueError, bad_input),
                          (SessionGone, gone), (SessionFull, full), (ModelBusy, busy)):
        app.add_exception_handler(kind, handler)


def checked_token(token: str) -> str:
    """The server's token, refused where a client could not send it: an HTTP header carries ASCII without spaces (a
    client writes other characters in another encoding than the server reads, so they never match)."""
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise DialogueError("TURNFORMER_TOKEN: use printable ASCII characters without spaces (an HTTP header carries it)")
    return token


class InternalErrors:
    """What no handler expected: logged with its traceback and answered with a 500 naming the exception's type, the
    connection kept. (Starlette's handler for Exception answers and then raises the exception again, on which uvicorn
    closes the connection at once: a client read a reset connection instead of the answer.)"""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            logger.exception("internal error: %r", exc)
            if started:  # part of an answer is out: only closing the connection can tell the client
                raise
            await error(500, f"internal error ({type(exc).__name__}); the server's log has the details")(scope, receive, send)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(header: str) -> str:
    """The name a Host header gives, without its port: ``localhost:8000`` -> ``localhost``, ``[::1]:8000`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class HostGuard:
    """Refuse (400) a request whose Host header names none of `names`: a server that listens on 127.0.0.1 answers
    only requests sent to this machine's own names, so that a web page whose name an attacker points at 127.0.0.1
    (DNS rebinding) cannot call it from the user's browser. A request without a Host header is no browser's."""

    def __init__(self, app, names: tuple[str, ...]):
        self.app, self.names = app, tuple(dict.fromkeys(host_name(name) for name in names))  # in order, once each

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"host")
            if given is not None and host_name(given.decode("latin-1")) not in self.names:
                return await error(400, f"Host {given.decode('latin-1')[:100]!r}: this server answers requests sent to "
                                        f"{', '.join(self.names)} only (turnformer serve --allowed-host NAME "
                                        "adds a name)")(scope, receive, send)
        await self.app(scope, receive, send)


class BearerGuard:
    """Refuse (401) a request to a /v1 endpoint but the health check without ``Authorization: Bearer <token>``, before
    anything reads its body: a client without the token learns nothing of what the server makes of it (FastAPI reads
    a body before an endpoint's dependencies)."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and scope["path"] != "/v1/health":
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given, self.token):
                return await error(401, "this server needs a bearer token: Authorization: Bearer TOKEN",
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
        await self.app(scope, receive, send)


def label_answer(prediction: dict) -> dict:
    """A model's answer for one utterance: its label, every label's probability (4 decimals, as `predict` writes
    them), whether the utterance was longer than the model reads (it read the utterance's start) and, where so, that
    the tokenizer kept nothing of it (``no_tokens``: the model read no word of it)."""
    answer = {"label": prediction["label"],
              "probabilities": {label: round(float(p), 4) for label, p in prediction["probabilities"].items()}}
    if "truncated" in prediction:
        answer["truncated"] = bool(prediction["truncated"])
    if prediction.get("no_tokens"):
        answer["no_tokens"] = True
    return answer


def session_routes(models: dict[str, LoadedModel], store: SessionStore, limits: Limits) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions", tags=["sessions"], route_class=StrictJSONRoute)

    @router.post("", status_code=201)
    def create_session(body: NewSession | None = None) -> dict:
        """Start a conversation that the chosen models (default: every model that streams) annotate one utterance at
        a time, each keeping its memory of the conversation on the server."""
        chosen = pick_models(models, body.models if body else None, STREAM, "models")
        session, evicted = store.create({m.name: m.session() for m in chosen})
        return {"session": session.id, "models": list(session.streams), "evicted_sessions": evicted}

    @router.post("/{session_id}/utterances")
    def add_utterance(session_id: str, turn: UtteranceIn) -> dict:
        """The next utterance: each model's label and probabilities for it, read with the conversation so far."""
        checked = checked_turn(turn, "", limits)  # the body is the turn: its fields named alone, as pydantic names them
        session = store.get(session_id)
        entry = session.add(checked, lambda name, stream: label_answer(models[name].add(stream, checked)))
        return {"session": session.id, **entry}

    @router.get("/{session_id}")
    def read_session(session_id: str) -> dict:
        """The session's models and its whole annotated history."""
        session = store.get(session_id)
        return {"session": session.id, "models": list(session.streams), "turns": session.history()}

    @router.delete("/{session_id}")
    def delete_session(session_id: str) -> dict:
        store.delete(session_id)
        return {"deleted": session_id}

    return router


def stateless_routes(models: dict[str, LoadedModel], limits: Limits) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["conversations"], route_class=StrictJSONRoute)

    @router.post("/annotate")
    def annotate(body: AnnotateIn) -> dict:
        """Every utterance of a conversation labelled by each chosen model (default: all that label), the whole
        conversation in one pass."""
        chosen = pick_models(models, body.models, ANNOTATE, "models")
        dialogue = conversation(body.turns, limits, body.id)
        per_model = {m.name: m.annotate(dialogue) for m in chosen}
        turns = [{"turn": i, "speaker": t.speaker, "text": t.text,
                  "annotations": {name: label_answer(answers[i]) for name, answers in per_model.items()}}
                 for i, t in enumerate(dialogue.turns)]
        return {"id": body.id, "models": list(per_model), "turns": turns, **ignored_fields(turns=body.turns)}

    @router.post("/rank")
    def rank(body: RankIn) -> dict:
        """The candidate replies to a conversation, scored (higher = better) and ranked, best first; ``truncated``:
        whether the model read less than all of the conversation and candidates (``note`` then says what it left out)."""
        ranker = pick_model(models, body.model, RANK)
        dialogue = conversation(body.turns, limits)
        candidates = candidate_turns(body.candidates, dialogue, limits)
        truncation: dict = {}
        scores = [round(float(s), 5) for s in ranker.rank(dialogue, candidates, truncation)]
        ranking = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep the candidates' order
        note = truncation.get("note")
        return {"model": ranker.name, "scores": scores, "ranking": ranking, "best": ranking[0],
                "best_text": candidates[ranking[0]].text, "truncated": note is not None, **({"note": note} if note else {}),
                **ignored_fields(turns=body.turns, candidates=body.candidates)}

    @router.post("/generate")
    def generate(body: GenerateIn) -> dict:
        """A reply to the conversation, spoken by ``speaker`` (default: the speaker before the last one); ``truncated``:
        whether the model read less than all of the conversation (``note`` then says what it read); ``unfinished``,
        only where so: the reply reached the model's last step without ending, cut there."""
        generator = pick_model(models, body.model, GENERATE)
        dialogue = conversation(body.turns, limits)
        if body.beam > limits.max_beam:
            raise DialogueError(f"beam: {body.beam}; at most {limits.max_beam}")
        speaker = checked_speaker(body.speaker, "speaker", limits)
        truncation: dict = {}
        reply = generator.respond(dialogue, speaker, body.beam, truncation)
        note, cut = truncation.get("note"), truncation.get("unfinished")
        return {"model": generator.name, "speaker": speaker or next_speaker(dialogue), "reply": reply,
                "truncated": note is not None, **({"note": note} if note else {}),
                **({"unfinished": cut} if cut else {}), **ignored_fields(turns=body.turns)}

    @router.post("/attention")
    def attention(body: AttentionIn) -> dict:
        """Which earlier tokens each head type of a DialogXL model attends to from one utterance's [CLS] (last layer,
        mean over the heads of each type; the DialogXL paper's Figure 5)."""
        model = pick_model(models, body.model, ATTENTION)
        dialogue = conversation(body.turns, limits)
        utterance = len(dialogue) - 1 if body.utterance is None else body.utterance
        if not 0 <= utterance < len(dialogue):
            raise DialogueError(f"utterance: {utterance} out of range: the conversation has {len(dialogue)} turns "
                                f"(0..{len(dialogue) - 1})")
        return {"model": model.name, **model.attention(dialogue, utterance), **ignored_fields(turns=body.turns)}

    return router


def create_app(models: dict[str, LoadedModel], limits: Limits = Limits(), token: str | None = None,
               session_prefix: str = "", allowed_hosts: Sequence[str] | None = None) -> FastAPI:
    """The server over `models` (`turnformer.serve.models.load_models`). With `token`, every /v1 endpoint but the
    health check needs ``Authorization: Bearer <token>``; session ids start with `session_prefix` (a worker's name,
    for a router in front of several processes); with `allowed_hosts`, a request whose Host header names another is
    refused (`HostGuard`)."""
    app = FastAPI(title="turnformer", version=__version__, default_response_class=JSONAnswer, redirect_slashes=False,
                  description="Emotions, dialogue acts, ranked and generated replies for conversations, from trained "
                              "turnformer models. Turns are {\"speaker\", \"text\"}, as in the JSONL files.")
    store = SessionStore(limits.max_sessions, limits.idle_seconds, limits.max_session_turns, session_prefix)
    for model in models.values():
        model.max_waiting = limits.max_waiting
    app.state.sessions = store  # the live sessions, for a program that embeds the app (a test moves their clock)
    app.state.request_seconds = limits.body_seconds  # what the server gives a request's head to arrive (`server.run`)
    add_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, seconds=limits.body_seconds)
    guard = []
    if token:
        app.add_middleware(BearerGuard, token=checked_token(token))  # added last, so the first to see a request: before BodyLimit
        # the scheme in the API's description (/docs asks for the token); the check itself is BearerGuard's
        guard = [Depends(HTTPBearer(auto_error=False, description="The token the server was started with (TURNFORMER_TOKEN)."))]
    if allowed_hosts is not None:
        app.add_middleware(HostGuard, names=tuple(allowed_hosts))
    app.add_middleware(InternalErrors)  # the outermost of ours: it answers for every one inside it

    @app.get("/v1/health", tags=["server"])
    async def health() -> dict:  # on the event loop: answered while every worker thread runs a model
        return {"status": "ok", "models": len(models), "sessions": len(store)}

    app.add_api_route("/v1/health", health, methods=["HEAD"], include_in_schema=False)  # monitors that ask with HEAD

    @app.get("/v1/models", tags=["server"], dependencies=guard)
    def list_models() -> dict:
        """The loaded models, and the most turns one request may send (`max_turns`: the page sends the newest)."""
        return {"models": [m.info() for m in models.values()], "max_turns": limits.max_turns, "limits": limits.for_clients()}

    app.include_router(session_routes(models, store, limits), dependencies=guard)
    app.include_router(stateless_routes(models, limits), dependencies=guard)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app
