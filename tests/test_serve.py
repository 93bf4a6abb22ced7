"""`turnformer serve`: the real app on uvicorn at 127.0.0.1, over HTTP, with tiny trained models of every task; each
answer checked against the same model called in-process, the limits, the errors (4xx naming the field, never a
5xx: a hypothesis fuzz too), the bearer token and the command itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from turnformer.cli import app as cli_app
from turnformer.dialogue import Dialogue, DialogueError, Turn
from turnformer.serve.app import LOOPBACK_NAMES, create_app, host_name
from turnformer.serve.models import load_models, session_memory, sessions_that_fit, tensor_bytes
from turnformer.serve.schemas import Limits
from turnformer.serve.server import BackgroundServer

from _benchmark_scripts import load_benchmark_script
from _serve_runs import tiny_runs
from test_imports import import_graph

TURNS = [{"speaker": "Bob", "text": "my dog died"}, {"speaker": "Ann", "text": "that is wonderful"},
         {"speaker": "Bob", "text": "I failed the exam"}, {"speaker": 7, "text": "great news , I passed !"}]


@pytest.fixture(scope="module")
def runs(tiny_backbone_dir, tmp_path_factory):
    return tiny_runs(tiny_backbone_dir, tmp_path_factory.mktemp("serve-runs"))


@pytest.fixture(scope="module")
def models(runs):
    return load_models([f"emotion={runs['erc']}", f"acts={runs['dialogue-act']}", f"ranker={runs['response-selection']}",
                        str(runs["generation"])])


@pytest.fixture(scope="module")
def client(models):
    with BackgroundServer(create_app(models)) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield http


def dialogue(turns=TURNS) -> Dialogue:
    return Dialogue.from_turns([(str(t["speaker"]), t["text"]) for t in turns])


def test_models_and_health(client):
    health = client.get("/v1/health").json()
    assert (health["status"], health["models"]) == ("ok", 4) and health["sessions"] >= 0  # other tests' sessions may live
    listed = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert client.get("/v1/models").json()["max_turns"] == 200  # the page sends at most the newest 200 turns
    limits = client.get("/v1/models").json()["limits"]  # what a client may send, and how long a session lives
    assert (limits["max_text_chars"], limits["max_session_turns"], limits["idle_seconds"]) == (2000, 1000, 1800.0)
    assert client.head("/v1/health").status_code == 200  # monitors that ask with HEAD
    assert list(listed) == ["emotion", "acts", "ranker", "generation"]  # the run folder's name where none is given
    emotion = listed["emotion"]
    assert (emotion["task"], emotion["model"], emotion["label_kind"]) == ("erc", "dialogxl", "emotion")
    assert sorted(emotion["labels"]) == ["joy", "sadness"] and emotion["serves"] == ["annotate", "attention", "stream"]
    assert emotion["results"]["best_epoch"] == 1 and "history" not in emotion["results"]
    assert listed["acts"]["serves"] == ["annotate", "stream"] and listed["acts"]["label_kind"] == "act"
    assert listed["ranker"]["serves"] == ["rank"] and listed["generation"]["serves"] == ["generate"]
    assert listed["generation"]["labels"] == [] and listed["generation"]["backbone"] is None
    # a local backbone folder by its name: its path is the server machine's
    assert emotion["backbone"] and "/" not in emotion["backbone"] and not emotion["backbone"].startswith("\\")
    assert client.get("/openapi.json").json()["paths"].keys() >= {"/v1/sessions", "/v1/annotate", "/v1/rank"}


def test_a_session_answers_each_utterance_as_the_models_streaming_sessions_do(client, models):
    created = client.post("/v1/sessions", json={"models": ["emotion", "acts"]})
    assert created.status_code == 201 and created.json()["models"] == ["emotion", "acts"]
    session = created.json()["session"]
    local = {name: models[name].session() for name in ("emotion", "acts")}
    answers = []
    for i, turn in enumerate(TURNS):
        answer = client.post(f"/v1/sessions/{session}/utterances", json=turn).json()
        assert (answer["session"], answer["turn"], answer["speaker"], answer["text"]) == (session, i, str(turn["speaker"]), turn["text"])
        for name, stream in local.items():
            expected = stream.add(str(turn["speaker"]), turn["text"])
            got = answer["annotations"][name]
            assert got["label"] == expected["label"] and got["truncated"] is False
            assert got["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-4)
        answers.append({k: answer[k] for k in ("turn", "speaker", "text", "annotations")})
    history = client.get(f"/v1/sessions/{session}").json()
    assert history == {"session": session, "models": ["emotion", "acts"], "turns": answers}
    # an utterance the tokenizer keeps nothing of (a combining mark alone): answered from its context, and said so
    marked = client.post(f"/v1/sessions/{session}/utterances", json={"speaker": "A", "text": "\u0301"}).json()
    assert all(marked["annotations"][name]["no_tokens"] is True for name in ("emotion", "acts"))
    assert client.delete(f"/v1/sessions/{session}").json() == {"deleted": session}
    gone = client.post(f"/v1/sessions/{session}/utterances", json=TURNS[0])
    assert gone.status_code == 410 and gone.json()["reason"] == "deleted" and "start a new one" in gone.json()["error"]
    unknown = client.get("/v1/sessions/nope")
    assert unknown.status_code == 404 and "not known here" in unknown.json()["error"]


def test_an_utterance_one_model_fails_on_is_taken_back_from_every_model_of_the_session(client, models, monkeypatch):
    acts_add = models["acts"].add

    def fails_on_boom(stream, turn):
        answer = acts_add(stream, turn)  # the act model's stream takes the utterance, then the call fails
        if turn.text == "boom":
            raise RuntimeError("the act model failed")
        return answer

    monkeypatch.setattr(models["acts"], "add", fails_on_boom)
    session = client.post("/v1/sessions", json={"models": ["emotion", "acts"]}).json()["session"]
    local = {name: models[name].session() for name in ("emotion", "acts")}
    with_boom = models["emotion"].session()  # what the emotion model answers where it kept the failed utterance
    for i, turn in enumerate(TURNS):
        if i == 1:
            failed = client.post(f"/v1/sessions/{session}/utterances", json={"speaker": "Ann", "text": "boom"})
            assert failed.status_code == 500 and "internal" in failed.json()["error"]
            with_boom.add("Ann", "boom")
        answer = client.post(f"/v1/sessions/{session}/utterances", json=turn).json()
        assert answer["turn"] == i  # the failed utterance took no place in the history
        kept = with_boom.add(str(turn["speaker"]), turn["text"])
        for name, stream in local.items():
            expected = stream.add(str(turn["speaker"]), turn["text"])
            assert answer["annotations"][name]["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-4)
        if i > 1:  # the check can tell: keeping the utterance would have changed the emotion model's answers
            assert max(abs(kept["probabilities"][k] - p) for k, p in answer["annotations"]["emotion"]["probabilities"].items()) > 1e-3
    assert [t["text"] for t in client.get(f"/v1/sessions/{session}").json()["turns"]] == [t["text"] for t in TURNS]


def test_annotate_and_rank_say_when_the_model_read_only_part_of_the_input(client, models):
    """/v1/annotate and /v1/rank cut an over-long utterance or candidate as the models read it (as `predict` does,
    which says so in a note) without saying so; sessions already answered ``truncated``."""
    long_text = "word " * 399  # several hundred word pieces: over either model's utterance length, under the server's limit
    turns = [*TURNS[:2], {"speaker": "Bob", "text": long_text}]
    annotated = client.post("/v1/annotate", json={"turns": turns}).json()
    for name in ("emotion", "acts"):
        assert [t["annotations"][name]["truncated"] for t in annotated["turns"]] == [False, False, True]
        assert [t["annotations"][name]["label"] for t in annotated["turns"]] == [p["label"] for p in models[name].annotate(dialogue(turns))]

    short = client.post("/v1/rank", json={"turns": TURNS, "candidates": ["why ?", "see you"]}).json()
    assert short["truncated"] is False and "note" not in short
    ranked = client.post("/v1/rank", json={"turns": TURNS, "candidates": ["why ?", long_text]}).json()
    assert ranked["truncated"] is True and "tokens dropped" in ranked["note"], ranked


def test_generate_says_when_a_reply_reached_the_models_last_step(client, models, monkeypatch):
    """/v1/generate returned a reply cut at the decoder's last step (no end of turn) as if the model had ended it;
    `generate` on a file says so in a note: the server says it in ``unfinished``, only where it is so."""
    from turnformer.tasks.generation import ResponseGenerator

    limit = models["generation"].model.config.max_response_words
    monkeypatch.setattr(ResponseGenerator, "replies", lambda self, dialogues, speakers=None: [(["you"] * (limit + 1), True)])
    cut = client.post("/v1/generate", json={"turns": TURNS}).json()
    assert cut["reply"] == "You" + " you" * limit and cut["truncated"] is False
    assert cut["unfinished"] == f"the reply reached the model's last step ({limit} words and one) without ending: cut there"
    monkeypatch.setattr(ResponseGenerator, "replies", lambda self, dialogues, speakers=None: [(["you"] * limit, False)])
    assert "unfinished" not in client.post("/v1/generate", json={"turns": TURNS}).json()  # as long as it may be, ended


def test_concurrent_sessions_are_answered_once_in_order_with_the_in_process_labels(client, models):
    sessions = [client.post("/v1/sessions", json={"models": ["emotion"]}).json()["session"] for _ in range(6)]
    results: dict[str, list] = {}

    def talk(session):
        with httpx.Client(base_url=str(client.base_url), timeout=60) as own:
            results[session] = [own.post(f"/v1/sessions/{session}/utterances", json=t).json() for t in TURNS]

    threads = [threading.Thread(target=talk, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stream = models["emotion"].session()
    expected = [stream.add(str(t["speaker"]), t["text"])["label"] for t in TURNS]
    for session in sessions:
        assert [a["turn"] for a in results[session]] == [0, 1, 2, 3]
        assert [a["annotations"]["emotion"]["label"] for a in results[session]] == expected
        assert len(client.get(f"/v1/sessions/{session}").json()["turns"]) == 4


def test_annotate_rank_generate_and_attention_answer_as_in_process(client, models):
    annotated = client.post("/v1/annotate", json={"id": "c1", "turns": TURNS}).json()
    assert annotated["models"] == ["emotion", "acts"] and annotated["id"] == "c1"
    for name in ("emotion", "acts"):
        expected = models[name].annotate(dialogue())
        assert [t["annotations"][name]["label"] for t in annotated["turns"]] == [p["label"] for p in expected]

    candidates = ["why the bank ?", {"speaker": "Ann", "text": "I like green tea ."}]
    ranked = client.post("/v1/rank", json={"turns": TURNS, "candidates": candidates}).json()
    scores = models["ranker"].rank(dialogue(), ["why the bank ?", ("Ann", "I like green tea .")])
    assert ranked["model"] == "ranker" and ranked["scores"] == pytest.approx(scores, abs=1e-5)
    assert ranked["ranking"][0] == ranked["best"] == max(range(2), key=scores.__getitem__)

    generated = client.post("/v1/generate", json={"turns": TURNS, "beam": 2}).json()
    generated.pop("unfinished", None)  # (the tiny model's reply may run to its last step: said as tested apart)
    assert generated == {"model": "generation", "speaker": "Bob", "reply": models["generation"].respond(dialogue(), None, 2),
                         "truncated": False}
    # the generator reads the last 4 turns, each its first 50 words: a longer conversation is said to be cut
    longer = [*TURNS, {"speaker": "Ann", "text": "word " * 60}]
    cut = client.post("/v1/generate", json={"turns": longer}).json()
    assert cut["truncated"] and cut["note"] == "the model read its last 4 of 5 turns; 1 of them cut to its first 50 words"
    assert client.post("/v1/generate", json={"turns": TURNS, "speaker": "Zoe"}).json()["speaker"] == "Zoe"
    assert client.post("/v1/generate", json={"turns": TURNS, "speaker": 3}).json()["speaker"] == "3"  # an id, as in turns

    view = client.post("/v1/attention", json={"turns": TURNS[:3], "utterance": 1}).json()
    expected = models["emotion"].attention(dialogue(TURNS[:3]), 1)
    assert view["model"] == "emotion" and view["utterance"] == 1 and view["tokens"] == expected["tokens"]
    assert set(view["weights"]) == {"local", "global", "speaker", "listener"}
    assert max(view["key_utterance"]) == 1  # the utterance and those before it
    assert "ignored_fields" not in annotated and "ignored_fields" not in ranked and "ignored_fields" not in view


def test_a_field_the_format_has_not_is_read_past_and_named_in_the_answer(client):
    """A file's unknown fields are counted in its load report; a request's were dropped without a word (a misspelt
    ``emotoin`` looked taken). The format's own fields (labels, id, the label shortcuts) are not named."""
    turns = [{**TURNS[0], "labels": {"emotion": "sadness"}, "id": "u1", "emotion": "sadness"},
             {**TURNS[1], "emotoin": "joy", "foo": 1}, *TURNS[2:]]
    answer = client.post("/v1/annotate", json={"turns": turns})
    assert answer.status_code == 200 and answer.json()["ignored_fields"] == ["turns[1].emotoin", "turns[1].foo"]
    plain = client.post("/v1/annotate", json={"turns": TURNS}).json()
    assert [t["annotations"] for t in answer.json()["turns"]] == [t["annotations"] for t in plain["turns"]]
    ranked = client.post("/v1/rank", json={"turns": TURNS, "candidates": ["ok", {"text": "no", "score": 1}]}).json()
    assert ranked["ignored_fields"] == ["candidates[1].score"]
    for path in ("/v1/generate", "/v1/attention"):
        assert client.post(path, json={"turns": turns}).json()["ignored_fields"] == ["turns[1].emotoin", "turns[1].foo"]
    session = client.post("/v1/sessions", json={}).json()["session"]  # a session's utterance refuses one, as before
    said = client.post(f"/v1/sessions/{session}/utterances", json={"speaker": "A", "text": "hi", "foo": 1})
    assert said.status_code == 422 and said.json()["error"].startswith("foo: Extra inputs are not permitted")


@pytest.mark.parametrize("method, path, body, status, message", [
    ("post", "/v1/annotate", {"turns": []}, 422, "turns: empty"),
    ("post", "/v1/annotate", {"turns": [{"speaker": "A"}]}, 422, "turns[0].text: Field required"),
    ("post", "/v1/annotate", {"turns": [{"speaker": "A", "text": " "}]}, 422, "turns[0]: text: empty utterance"),
    ("post", "/v1/annotate", {"turns": [{"speaker": True, "text": "hi"}]}, 422, "turns[0].speaker: Input should be a valid string"),
    ("post", "/v1/annotate", {"turns": [{"speaker": "A", "text": "x" * 2001}]}, 422, "turns[0].text: 2001 characters; at most 2000"),
    ("post", "/v1/annotate", {"turns": [{"speaker": "A", "text": "hi"}] * 201}, 422, "turns: 201 turns; at most 200"),
    ("post", "/v1/annotate", {"turn": [{"speaker": "A", "text": "hi"}]}, 422, "turns: Field required"),
    ("post", "/v1/annotate", {"turns": TURNS, "models": ["ranker"]}, 422, "models[0]: 'ranker' (response-selection) cannot label"),
    ("post", "/v1/sessions", {"models": ["nope"]}, 422, "models[0]: no model 'nope' is loaded (loaded: emotion (erc), acts"),
    ("post", "/v1/sessions", {"models": []}, 422, "models: empty"),
    ("post", "/v1/rank", {"turns": TURNS, "candidates": []}, 422, "candidates: empty"),
    ("post", "/v1/rank", {"turns": TURNS, "candidates": ["ok", 3]}, 422, "candidates[1]"),
    ("post", "/v1/rank", {"turns": TURNS, "candidates": ["ok"] * 21}, 422, "candidates: 21; at most 20"),
    ("post", "/v1/generate", {"turns": TURNS, "beam": 0}, 422, "beam: Input should be greater than or equal to 1"),
    ("post", "/v1/generate", {"turns": TURNS, "beam": 9}, 422, "beam: 9; at most 8"),
    ("post", "/v1/generate", {"turns": TURNS, "speaker": " "}, 422, "speaker: empty"),
    ("post", "/v1/attention", {"turns": TURNS, "utterance": 4}, 422, "utterance: 4 out of range"),
    ("post", "/v1/attention", {"turns": TURNS, "model": "acts"}, 422, "model: 'acts' (dialogue-act) cannot show"),
    # the body is the turn: its fields named alone, as pydantic names a missing one
    ("post", "/v1/sessions/nope/utterances", {"speaker": "A", "text": ""}, 422, "text: empty utterance"),
    ("post", "/v1/sessions/nope/utterances", {"speaker": "A" * 101, "text": "hi"}, 422, "speaker: 101 characters; at most 100"),
    ("post", "/v1/sessions/nope/utterances", {"text": "hi"}, 422, "speaker: Field required"),
    ("post", "/v1/annotate", {"turns": TURNS, "id": " "}, 422, "id: empty; leave it out"),
    ("get", "/v1/nothing", None, 404, "Not Found"),
    ("post", "/v1/annotate/", {"turns": TURNS}, 404, "Not Found: /v1/annotate/ (the endpoints are written without a final"),
    ("put", "/v1/annotate", None, 405, "Method Not Allowed"),
])
def test_bad_input_is_a_4xx_naming_the_field(client, method, path, body, status, message):
    answer = client.request(method.upper(), path, json=body)
    assert answer.status_code == status and answer.json()["error"].startswith(message), answer.text


def test_a_list_of_many_wrong_items_is_answered_with_its_first_problems(client):
    """A 1 MB list of numbers as turns was a 422 listing every one of its half a million problems (about 50 MB)."""
    answer = client.post("/v1/annotate", json={"turns": [1] * 5000})
    assert answer.status_code == 422 and len(answer.json()["problems"]) == 20 and len(answer.content) < 20_000
    assert answer.json()["error"].startswith("turns[0]: ") and "(and 4999 more: the first 20 in problems)" in answer.json()["error"]


def test_a_model_with_as_many_calls_waiting_as_the_server_lets_wait_answers_503(models):
    """Calls to one busy model waited without end, each holding a worker thread, until none was left for any request.
    A call past `max_waiting` is a 503 with Retry-After; an utterance streamed to a session still waits (refused after
    another of its models took it, the session's models would disagree), and the health check answers meanwhile."""
    emotion = models["emotion"]
    session = emotion.session()
    try:
        with BackgroundServer(create_app(models, Limits(max_waiting=1))) as url, httpx.Client(base_url=url, timeout=60) as http:
            emotion.lock.acquire()  # a long call running
            waiters = [threading.Thread(target=emotion.annotate, args=(Dialogue((Turn("A", "hi"),)),)),
                       threading.Thread(target=emotion.add, args=(session, Turn("A", "hi")))]
            try:
                for expected, waiter in enumerate(waiters, 1):
                    waiter.start()
                    for _ in range(500):
                        if emotion.waiting == expected:
                            break
                        time.sleep(0.01)
                    assert emotion.waiting == expected  # the streamed utterance waits beyond max_waiting
                busy = http.post("/v1/annotate", json={"turns": TURNS, "models": ["emotion"]})
                assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
                assert busy.json()["error"] == "model 'emotion': 2 calls wait for it already, the most this server lets wait; try again shortly"
                assert http.post("/v1/annotate", json={"turns": TURNS, "models": ["acts"]}).status_code == 200  # another model
                assert http.get("/v1/health").status_code == 200
            finally:
                emotion.lock.release()
                for waiter in waiters:
                    waiter.join()
            assert emotion.waiting == 0 and http.post("/v1/annotate", json={"turns": TURNS, "models": ["emotion"]}).status_code == 200
    finally:
        for model in models.values():
            model.max_waiting = Limits().max_waiting


def test_bodies_that_are_not_json_objects_are_4xx(client):
    json_type = {"content-type": "application/json"}
    bad = client.post("/v1/annotate", content=b"{nope", headers=json_type)
    assert bad.status_code == 400 and bad.json()["error"].startswith("body: not valid JSON")  # as a key twice is
    # JSON sent as a form (curl -d without -H): FastAPI does not read it as JSON; the error says what to send
    form = client.post("/v1/annotate", content=b'{"turns": []}', headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 422 and "Content-Type is application/x-www-form-urlencoded" in form.json()["error"], form.text
    assert "Content-Type: application/json" in form.json()["error"]
    assert "Content-Type" not in client.post("/v1/annotate", content=b"[1]", headers=json_type).json()["error"]
    surrogate = client.post("/v1/annotate", content=b'{"turns": [{"speaker": "\\ud800", "text": "hi"}]}', headers=json_type)
    assert surrogate.status_code == 422 and surrogate.json()["error"] == "turns[0].speaker: not valid Unicode (surrogates not allowed at character 0)"
    named = client.post("/v1/sessions", content=b'{"models": ["\\udfff"]}', headers=json_type)
    assert named.status_code == 422 and "no model" in named.json()["error"]  # the name, escaped, in valid JSON
    latin1 = client.post("/v1/annotate", content='{"turns": [{"speaker": "A", "text": "café"}]}'.encode("latin-1"), headers=json_type)
    assert latin1.status_code == 400 and latin1.json()["error"].startswith("body: not UTF-8 text (byte 40: invalid continuation byte)")
    body = '{"turns": [{"speaker": "A", "text": "hi"}]}'
    for encoding in ("utf-16", "utf-16-le", "utf-16-be", "utf-32"):  # Python's JSON reader would take them
        wide = client.post("/v1/annotate", content=body.encode(encoding), headers=json_type)
        assert wide.status_code == 400 and wide.json()["error"] == ("body: not UTF-8 text (UTF-16 or UTF-32, by its first "
                                                                    "bytes); send JSON in UTF-8"), encoding
    assert client.post("/v1/annotate", content=body.encode("utf-8-sig"), headers=json_type).status_code == 200  # a BOM
    import gzip

    for headers in (json_type, {**json_type, "content-encoding": "gzip"}):  # a gzip header has NUL bytes too
        packed = client.post("/v1/annotate", content=gzip.compress(body.encode()), headers=headers)
        assert packed.status_code == 400 and "is not read: send the JSON uncompressed" in packed.json()["error"], packed.text
    twice = client.post("/v1/annotate", content=b'{"turns": [{"speaker": "A", "text": "hi", "text": "bye"}]}', headers=json_type)
    assert twice.status_code == 400 and twice.json()["error"] == ("body: the key 'text' appears twice in one object (a JSON "
                                                                  "reader would keep only the last); its second value at "
                                                                  "line 1, column 51")
    session = client.post("/v1/sessions", json={"models": ["emotion"]}).json()["session"]
    said = client.post(f"/v1/sessions/{session}/utterances", content=b'{"speaker": "A", "speaker": "B", "text": "hi"}',
                       headers=json_type)
    assert said.status_code == 400 and "'speaker' appears twice" in said.json()["error"]
    assert client.get(f"/v1/sessions/{session}").json()["turns"] == []  # nothing was taken
    nan = client.post("/v1/generate", content=b'{"turns": [{"speaker": "A", "text": "hi"}], "beam": NaN}', headers=json_type)
    assert nan.status_code == 400 and nan.json()["error"] == "body: NaN is not a JSON value (write null, or a number)"
    deep = client.post("/v1/annotate", content=b"[" * 50000 + b"]" * 50000, headers=json_type)
    assert deep.status_code in (400, 422) and deep.json()["error"].startswith("body: ")
    too_big = client.post("/v1/annotate", content=b" " * (2 << 20), headers=json_type)
    assert too_big.status_code == 413 and "over 1048576 bytes" in too_big.json()["error"]
    assert "send fewer turns" in too_big.json()["error"]  # 200 turns of 2,000 characters in a 3-byte script are 1.2 MB

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b" " * 32768

    assert client.post("/v1/annotate", content=chunks(), headers=json_type).status_code == 413


def test_sessions_are_bounded_in_number_idle_time_and_length(models):
    limits = Limits(max_sessions=2, idle_seconds=60, max_session_turns=2)
    app = create_app(models, limits, session_prefix="w3-")
    now = [0.0]
    app.state.sessions.clock = lambda: now[0]
    with BackgroundServer(app) as url, httpx.Client(base_url=url) as http:
        first, second = (http.post("/v1/sessions", json={"models": ["acts"]}).json() for _ in range(2))
        assert first["session"].startswith("w3-") and second["evicted_sessions"] == 0
        assert http.post(f"/v1/sessions/{second['session']}/utterances", json=TURNS[0]).status_code == 200  # now the newest use
        third = http.post("/v1/sessions", json={"models": ["acts"]}).json()
        assert third["evicted_sessions"] == 1
        evicted = http.get(f"/v1/sessions/{first['session']}")
        assert evicted.status_code == 410 and evicted.json()["reason"] == "evicted" and "at most 2 sessions" in evicted.json()["error"]
        assert http.post(f"/v1/sessions/{second['session']}/utterances", json=TURNS[1]).status_code == 200
        full = http.post(f"/v1/sessions/{second['session']}/utterances", json=TURNS[2])
        assert full.status_code == 409 and "holds 2 utterances" in full.json()["error"]
        now[0] += 61
        expired = http.get(f"/v1/sessions/{third['session']}")
        assert expired.status_code == 410 and "expired after 60 s" in expired.json()["error"]
        assert http.get("/v1/health").json()["sessions"] == 0


def test_a_token_guards_every_endpoint_but_the_health_check(models):
    with BackgroundServer(create_app(models, token="s3cret")) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/health").status_code == 200
        refused = http.get("/v1/models")
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert http.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.post("/v1/annotate", json={"turns": TURNS}).status_code == 401
        assert http.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        # refused before its body is read: a body the server cannot read is no 400/422 to a client without the token
        for body in (b"garbage", b'{"a": 1, "a": 2}'):
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                unread = http.post("/v1/generate", content=body, headers={"Content-Type": "application/json", **headers})
                assert unread.status_code == 401 and "bearer token" in unread.json()["error"], unread.text
        for scheme in ("Basic s3cret", "Bearer  s3cret", "bearer s3cret"):
            assert http.get("/v1/models", headers={"Authorization": scheme}).status_code == (200 if scheme == "bearer s3cret" else 401)
        assert http.get("/openapi.json").json()["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        assert http.get("/").status_code == 200  # the page itself asks for the token
    # a token that an HTTP header cannot carry as the server reads it (curl sent "sécret" in UTF-8, the server compared
    # it read as Latin-1: never equal) is refused when the server starts, not with a 401 to every request
    for token in ("sécret", "two words"):
        with pytest.raises(DialogueError, match="TURNFORMER_TOKEN: use printable ASCII"):
            create_app(models, token=token)
    refused = CliRunner().invoke(cli_app, ["serve", "--checkpoint", "x", "--port", "1"], env={"TURNFORMER_TOKEN": "sécret"})
    assert refused.exit_code == 2 and "TURNFORMER_TOKEN: use printable ASCII" in refused.output, refused.output
    # set but empty (TURNFORMER_TOKEN=$SECRET with SECRET unset) served every request without a token, silently
    empty = CliRunner().invoke(cli_app, ["serve", "--checkpoint", "x", "--port", "1"], env={"TURNFORMER_TOKEN": ""})
    assert empty.exit_code == 2 and "TURNFORMER_TOKEN: use printable ASCII" in empty.output, empty.output


def test_a_server_on_this_machines_address_answers_requests_sent_to_its_own_names_only(models):
    assert [host_name(h) for h in ("localhost:8000", "[::1]:8000", "[::1]", "127.0.0.1", "Any_Worker", " a.b:1 ")] == \
        ["localhost", "::1", "::1", "127.0.0.1", "any_worker", "a.b"]
    app = create_app(models, allowed_hosts=[*LOOPBACK_NAMES, "any_worker"])
    with BackgroundServer(app) as url, httpx.Client(base_url=url) as http:
        for host in ("127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000", "any_worker"):
            assert http.get("/v1/health", headers={"Host": host}).status_code == 200, host
        for path in ("/v1/health", "/v1/models", "/"):  # a page whose name was pointed at 127.0.0.1 (DNS rebinding)
            refused = http.get(path, headers={"Host": "rebound.example:8000"})
            assert refused.status_code == 400 and refused.json()["error"].startswith("Host 'rebound.example:8000': this server "
                                                                                     "answers requests sent to localhost, 127.0.0.1, ::1, any_worker only")
            assert "--allowed-host" in refused.json()["error"]
        posted = http.post("/v1/annotate", json={"turns": TURNS}, headers={"Host": "rebound.example"})
        assert posted.status_code == 400 and "rebound.example" in posted.json()["error"]


def test_fuzzed_requests_get_no_5xx(client):
    """Malformed and near-valid requests of every endpoint (benchmarks/serve_load.py's fuzz): 4xx or 2xx, never 5xx."""
    serve_load = load_benchmark_script("serve_load")
    tried, server_errors = serve_load.fuzz(str(client.base_url), 150)
    assert tried == 150 and server_errors == []


def test_the_load_benchmark_answers_every_utterance_in_order_as_in_process(client, models):
    serve_load = load_benchmark_script("serve_load")
    conversations = [[(str(t["speaker"]), t["text"]) for t in TURNS]] * 3
    measured = serve_load.measure(models, conversations, 120, str(client.base_url))
    assert measured["answered"] == measured["utterances"] == 12 and measured["identical_to_in_process"]
    assert measured["in_order"] and measured["server"]["p95_ms"] >= measured["server"]["p50_ms"] > 0


def test_the_command_serves_its_checkpoints(runs):
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", str(runs["erc"] / "nope")])
    assert bad.exit_code == 2 and "nope: no such run or checkpoint folder" in bad.output
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", f"a={runs['erc']}", "--checkpoint", f"a={runs['generation']}"])
    assert bad.exit_code == 2 and "the name 'a' is taken" in bad.output
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", "a="])
    assert bad.exit_code == 2 and "--checkpoint a=: no folder after a=" in bad.output
    # a name no model can have was read as a folder, and NAME= was dropped from a missing folder's error
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", f"my model={runs['erc']}"])
    assert bad.exit_code == 2 and "'my model' is no model name" in " ".join(bad.output.split()), bad.output
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", "zz=nowhere"])
    assert bad.exit_code == 2 and "--checkpoint zz=nowhere: nowhere: no such run or checkpoint folder" in bad.output
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", str(runs["erc"]), "--worker", "a b"])
    assert bad.exit_code == 2 and "--worker 'a b'" in bad.output
    with socket.create_server(("127.0.0.1", 0)) as taken:   # an address that cannot serve: refused before the models load
        used = taken.getsockname()[1]
        bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", str(runs["erc"]), "--port", str(used)])
        assert bad.exit_code == 2 and f"--port {used}: already in use on 127.0.0.1" in bad.output
        assert "erc model" not in bad.output
    bad = CliRunner().invoke(cli_app, ["serve", "--checkpoint", str(runs["erc"]), "--host", "999.1.1.1"])
    assert bad.exit_code == 2 and "--host 999.1.1.1: not an address this machine knows" in bad.output

    port = load_benchmark_script("serve_load").free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "turnformer.cli", "--threads", "1", "serve", "--checkpoint", str(runs["erc"]),
                                "--port", str(port), "--max-session-turns", "100"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        health = None
        for _ in range(300):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read()
                time.sleep(0.2)
        assert health is not None and health.json() == {"status": "ok", "models": 1, "sessions": 0}
        page = httpx.get(f"http://127.0.0.1:{port}/")
        assert page.status_code == 200 and "/static/app.js" in page.text
        rebound = httpx.get(f"http://127.0.0.1:{port}/v1/health", headers={"Host": f"rebound.example:{port}"})
        assert rebound.status_code == 400 and "--allowed-host" in rebound.json()["error"]
    finally:
        process.terminate()
        output = process.communicate(timeout=20)[0]
    assert "erc: erc model dialogxl" in output and f"http://127.0.0.1:{port}/" in output
    assert "a live conversation holds up to" in output and "1000 conversations, up to" in output
    assert "for 100 turns of history" in output  # --max-session-turns: 1000 sessions of 100 turns fit this machine


def test_the_server_says_what_its_live_conversations_can_hold(models):
    """What a streaming session holds once full is measured (DialogXL: its memory of mem_len tokens in every layer,
    with their metadata; a dialogue-act model: its last P vectors), and a session limit that could take more than half
    of the machine's memory gets a warning with one that fits."""
    dialogxl = models["emotion"].model
    layers, hidden, mem_len = dialogxl.encoder.num_layers, dialogxl.encoder.config.hidden_size, dialogxl.config.mem_len
    states = layers * mem_len * hidden * 4
    held = models["emotion"].session_bytes()
    assert states <= held <= states + mem_len * 8 * 16  # the states, and a few integer metadata fields a token
    session = models["emotion"].session()
    assert tensor_bytes(vars(session).values()) < held  # an empty session holds less
    acts = models["acts"].session_bytes()
    assert 0 < acts < held
    said, warning = session_memory(models, Limits(max_sessions=10), physical=1 << 40)
    # history: 12 bytes a character of text and speaker (a string of emoji, 4, its UTF-8 copy, 4, and more as measured),
    # 1 KB of answers a model
    per_session = held + acts + 1000 * (12 * (2000 + 100) + 2 * 1024)
    assert warning is None and f"up to {per_session / 2**20:.1f} MiB ({(held + acts) / 2**20:.1f} MiB of model state" in said
    said, warning = session_memory(models, Limits(max_sessions=1000), physical=per_session * 100)
    assert f"--max-sessions 1000: the live conversations could take" in warning and "--max-sessions 50 keeps" in warning
    assert sessions_that_fit(models, Limits(), physical=per_session * 100) == 50  # the server's default, where < 1000
    assert sessions_that_fit(models, Limits(max_session_turns=10), physical=per_session * 100) > 50
    assert session_memory({"ranker": models["ranker"]}, Limits()) == (None, None)  # nothing streams: nothing held


def test_the_server_reaches_tasks_through_the_registry_and_their_interface():
    graph = import_graph()
    assert {"turnformer.serve.app", "turnformer.serve.models"} <= set(graph)  # the graph reads the server
    for module in (m for m in graph if m.startswith("turnformer.serve")):
        tasks = {t for t in graph[module] if t.startswith("turnformer.tasks")}
        assert tasks <= {"turnformer.tasks.registry", "turnformer.tasks.base"}, (module, sorted(tasks))
        assert "turnformer.cli" not in graph[module]


def test_the_command_line_starts_without_the_server_libraries():
    probe = "import sys, turnformer.cli; print(sorted(m for m in ('fastapi', 'uvicorn', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_a_body_that_stops_half_way_is_a_408_and_frees_its_connection(models):
    """A client that promises more body than it sends gets a 408 naming the limit once the body is late, its
    connection closed; a body sent whole in time is answered, and the server goes on answering."""
    with BackgroundServer(create_app(models, Limits(body_seconds=0.5))) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(b"POST /v1/annotate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"turns\": [")
            start, answer = time.monotonic(), b""
            while chunk := conn.recv(4096):  # the server closes the connection after its answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"request body not complete within 0.5 s" in answer
        assert 0.4 < time.monotonic() - start < 5
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.get("/v1/health").status_code == 200
            assert http.post("/v1/annotate", json={"turns": TURNS}).status_code == 200


def test_a_head_that_stops_half_way_is_a_408_and_frees_its_connection(models):
    """uvicorn times no request head: a client that sent part of its headers (or one byte at a time, each restarting
    uvicorn's keep-alive timer) held its connection open for ever. The head has the body's deadline; a request sent
    whole on the same kind of connection is answered as before."""
    with BackgroundServer(create_app(models, Limits(body_seconds=0.5))) as url:
        host, port = url.removeprefix("http://").split(":")
        for dribble in (False, True):
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                start, answer = time.monotonic(), b""
                conn.sendall(b"POST /v1/annotate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                while dribble and time.monotonic() - start < 1.5:  # a byte every 0.1 s: past the deadline all the same
                    try:
                        conn.sendall(b"X")
                    except OSError:  # closed by the server
                        break
                    time.sleep(0.1)
                while chunk := conn.recv(4096):  # the server closes the connection after its answer
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 408") and b"request head not complete within 0.5 s" in answer, answer
            assert 0.4 < time.monotonic() - start < 5
        with socket.create_connection((host, int(port)), timeout=10) as conn:  # nothing sent: closed, no answer
            start = time.monotonic()
            assert conn.recv(4096) == b"" and 0.4 < time.monotonic() - start < 5
        with socket.create_connection((host, int(port)), timeout=10) as conn:  # a head in time, then an idle connection
            conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.post("/v1/annotate", json={"turns": TURNS}).status_code == 200


def test_a_model_is_named_after_its_run_folder_or_the_link_to_it(tmp_path, monkeypatch):
    from turnformer.serve.models import default_name

    run = tmp_path / "runs" / "meld-mb"
    (run / "best").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "meld").symlink_to(run)
    monkeypatch.chdir(run)
    assert [default_name(p) for p in (run, run / "best", tmp_path / "meld", Path("."), Path("best"), Path("../meld-mb/"))] \
        == ["meld-mb", "meld-mb", "meld", "meld-mb", "meld-mb", "meld-mb"]
    assert default_name(tmp_path / "a run (2)") == "a-run-2"


def test_an_utterance_with_a_field_no_turn_has_is_refused_and_a_file_turn_is_read(client):
    """`{"speaker", "text", "models": [...]}` posted to a session was answered 200, `models` silently left out (the
    session's models are chosen when it starts), while every other endpoint refuses a field it does not read."""
    from turnformer.dialogue import TURN_KEYS
    from turnformer.serve.schemas import UtteranceIn

    assert set(UtteranceIn.model_fields) == TURN_KEYS  # a turn of the generic format, as conversation files hold them
    session = client.post("/v1/sessions", json={"models": ["emotion"]}).json()["session"]
    path = f"/v1/sessions/{session}/utterances"
    refused = client.post(path, json={"speaker": "A", "text": "hi", "models": ["acts"]})
    assert refused.status_code == 422 and refused.json()["error"] == "models: Extra inputs are not permitted", refused.text
    read = client.post(path, json={"speaker": "A", "text": "hi", "emotion": "joy", "id": "u1", "labels": {"act": "inform"}})
    assert read.status_code == 200 and read.json()["turn"] == 0, read.text
    assert [t["text"] for t in client.get(f"/v1/sessions/{session}").json()["turns"]] == ["hi"]
