"""`turnformer serve` under load, on this machine, against 127.0.0.1 only (bounded in count and time).

    python benchmarks/serve_load.py --checkpoint RUN [--checkpoint RUN ...] [--sessions 50] [--utterances 20]
        [--fuzz 1000] [--time-cap 600] [--threads 1]

-> ``benchmarks/results/serve-load.json``. The checkpoints are served by the real command (``turnformer serve`` in
its own process, on a free port of 127.0.0.1). Conversations: ``--sessions`` runs of ``--utterances`` consecutive
utterances of the first checkpoint's test split. Four parts:

1. in-process: each conversation through every streaming model's session (`Task.session`), one utterance at a time,
   as a program that imports turnformer would; the latency per utterance (all models) and the labels;
2. under load: one client thread per conversation, all at once, each creating its session (every streaming model)
   and adding its utterances one after the other; the round-trip latency per utterance (p50, p95), the throughput
   over the whole load, and whether every utterance was answered once, in order (its turn index, and the session's
   history read back), with the labels of part 1;
3. one request at a time (the first five conversations): the server's latency per utterance without queueing,
   whose median over part 1's is the server's overhead ratio;
4. a fuzz of malformed and near-valid requests of every endpoint (hypothesis): how many were tried and which got a
   5xx (there must be none).

``--time-cap`` bounds each timed part; a part cut short is marked partial. Torch runs on ``--threads`` threads in
both processes (default 1: the machine's cores are shared with the client threads and other work).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Sequence
from urllib.parse import quote

import httpx
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from turnformer.dialogue import DialogueError, Turn
from turnformer.errors import CheckpointError
from turnformer.results import make_result, write_result
from turnformer.serve.models import LoadedModel, load_models
from turnformer.tasks.base import STREAM

Conversation = Sequence[tuple[str, str]]


def percentile(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def summary(latencies_s: Sequence[float], utterances: int, wall_s: float) -> dict:
    ms = [s * 1000 for s in latencies_s]
    return {"p50_ms": statistics.median(ms), "p95_ms": percentile(ms, 95), "mean_ms": statistics.fmean(ms),
            "utterances_per_s": utterances / wall_s, "wall_s": wall_s}


def conversations_of(model: LoadedModel, sessions: int, utterances: int) -> list[list[tuple[str, str]]]:
    """``sessions`` conversations of ``utterances`` consecutive utterances of `model`'s test split."""
    dialogues = model.task.load_data(model.run["recipe"], None, only=("test",))["test"]
    turns = [(t.speaker, t.text) for d in dialogues for t in d.turns]
    if len(turns) < sessions * utterances:
        raise SystemExit(f"the test split has {len(turns)} utterances; {sessions} x {utterances} asked for")
    return [turns[i * utterances:(i + 1) * utterances] for i in range(sessions)]


def in_process(models: Sequence[LoadedModel], conversations: Sequence[Conversation], time_cap_s: float) -> dict:
    """Every conversation through each model's streaming session: per conversation, per utterance, each model's
    label; the seconds per utterance (all models)."""
    deadline = time.monotonic() + time_cap_s
    labels, latencies, started = [], [], time.perf_counter()
    for turns in conversations:
        streams = {m.name: m.session() for m in models}
        labels.append([])
        for speaker, text in turns:
            if time.monotonic() > deadline:
                break
            start = time.perf_counter()
            labels[-1].append({m.name: m.add(streams[m.name], Turn(speaker, text))["label"] for m in models})
            latencies.append(time.perf_counter() - start)
    done = sum(map(len, labels))
    return {"labels": labels, "latencies": latencies, "partial": done < sum(map(len, conversations)),
            **summary(latencies, done, time.perf_counter() - started)}


def converse(url: str, names: Sequence[str], turns: Conversation, deadline: float, latencies: list) -> dict:
    """One client: a session over `names`, its utterances added one after the other, its history read back."""
    with httpx.Client(base_url=url, timeout=600) as http:
        session = http.post("/v1/sessions", json={"models": list(names)}).json()["session"]
        answers = []
        for speaker, text in turns:
            if time.monotonic() > deadline:
                break
            start = time.perf_counter()
            answer = http.post(f"/v1/sessions/{session}/utterances", json={"speaker": speaker, "text": text})
            latencies.append(time.perf_counter() - start)  # list.append: one at a time under the GIL
            answers.append(answer.json() if answer.status_code == 200 else {"error": answer.status_code})
        history = http.get(f"/v1/sessions/{session}").json()["turns"]
        http.delete(f"/v1/sessions/{session}")
    return {"answers": answers, "history": history}


def load(url: str, names: Sequence[str], conversations: Sequence[Conversation], time_cap_s: float,
         concurrent: bool = True) -> dict:
    """Every conversation against the server, all at once (a thread each) or one after the other."""
    deadline = time.monotonic() + time_cap_s
    latencies: list[float] = []
    results: list[dict | None] = [None] * len(conversations)

    def client(i: int) -> None:
        results[i] = converse(url, names, conversations[i], deadline, latencies)

    started = time.perf_counter()
    if concurrent:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(conversations))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for i in range(len(conversations)):
            client(i)
    wall = time.perf_counter() - started
    answered = sum(len(r["answers"]) for r in results)
    return {"results": results, "answered": answered, "partial": answered < sum(map(len, conversations)),
            **summary(latencies, answered, wall)}


def check(results: Sequence[dict], expected: Sequence[Sequence[dict]], names: Sequence[str]) -> dict:
    """Whether every utterance was answered once, in order (turn indices 0, 1, ... in the answers and in the session's
    history, which holds each once), and with the in-process labels."""
    in_order = identical = True
    for result, labels in zip(results, expected):
        answers = result["answers"]
        in_order &= [a.get("turn") for a in answers] == list(range(len(answers)))
        in_order &= [h["turn"] for h in result["history"]] == list(range(len(answers)))
        got = [{name: a["annotations"][name]["label"] for name in names} for a in answers if "annotations" in a]
        identical &= len(got) == len(answers) and got == list(labels[: len(got)])
    return {"in_order": bool(in_order), "identical_to_in_process": bool(identical)}


def measure(models: dict[str, LoadedModel], conversations: Sequence[Conversation], time_cap_s: float, url: str) -> dict:
    """Parts 1 to 3 (see the module's docstring), against the server at `url`, which serves `models`."""
    streaming = [m for m in models.values() if STREAM in m.serves]
    names = [m.name for m in streaming]
    local = in_process(streaming, conversations, time_cap_s)
    loaded = load(url, names, conversations, time_cap_s)
    sequential = load(url, names, conversations[:5], time_cap_s, concurrent=False)
    return {
        "models": names, "sessions": len(conversations), "utterances": sum(map(len, conversations)),
        "answered": loaded["answered"], **check(loaded["results"], local["labels"], names),
        "in_process": strip(local), "server": strip(loaded), "server_one_at_a_time": strip(sequential),
        "overhead_ratio": sequential["p50_ms"] / local["p50_ms"],
        "throughput_ratio": loaded["utterances_per_s"] / local["utterances_per_s"],
        "partial": local["partial"] or loaded["partial"] or sequential["partial"],
    }


def strip(part: dict) -> dict:
    return {k: v for k, v in part.items() if k not in ("labels", "latencies", "results")}


# -- the fuzz ---------------------------------------------------------------------------------------------------------

WORDS = st.sampled_from(["hello", "my dog died", "I love this", "why ?", "", " ", "\u200b", "x" * 2001, "??!!", "[CLS]"])
TEXT = WORDS | st.text(max_size=40) | st.text(st.characters(categories=["Cs", "Cc", "Cf", "Mn"]), max_size=4)
SCALAR = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | TEXT
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=10)
TURN = st.fixed_dictionaries({"speaker": TEXT | st.integers(-3, 3) | SCALAR, "text": TEXT | SCALAR},
                             optional={"labels": JSON, "id": JSON}) | JSON
GOOD_TURN = st.fixed_dictionaries({"speaker": st.sampled_from(["A", "B", 0, 1]), "text": st.sampled_from(["hello", "my dog died", "why ?"])})
TURNS = (st.lists(GOOD_TURN, min_size=1, max_size=6) | st.lists(TURN, max_size=6) | st.just([{"speaker": "A", "text": "hi"}] * 201)
         | JSON)


def bodies(names: Sequence[str]) -> dict[str, st.SearchStrategy]:
    """Per endpoint, near-valid bodies (right fields, odd values) and anything at all."""
    model = st.sampled_from([*names, "nope"]) | SCALAR
    models = st.lists(model, max_size=3) | SCALAR
    return {
        "/v1/sessions": st.fixed_dictionaries({}, optional={"models": models, "extra": JSON}) | JSON,
        "/v1/annotate": st.fixed_dictionaries({"turns": TURNS}, optional={"models": models, "id": TEXT | SCALAR}) | JSON,
        "/v1/rank": st.fixed_dictionaries({"turns": TURNS, "candidates": st.lists(TEXT | TURN, max_size=22) | JSON},
                                          optional={"model": model}) | JSON,
        "/v1/generate": st.fixed_dictionaries({"turns": TURNS}, optional={"model": model, "speaker": TEXT | SCALAR,
                                                                           "beam": st.integers(-2, 10) | SCALAR}) | JSON,
        "/v1/attention": st.fixed_dictionaries({"turns": TURNS}, optional={"model": model,
                                                                            "utterance": st.integers(-3, 8) | SCALAR}) | JSON,
    }


def encoded(body) -> bytes:
    return json.dumps(body, ensure_ascii=True).encode()  # NaN written as NaN, a lone surrogate as \ud800: both sent


def fuzz(url: str, examples: int, seed_value: int = 0) -> tuple[int, list[dict]]:
    """`examples` requests drawn by hypothesis against the server at `url`: JSON bodies for every endpoint (and a live
    session's utterances), raw bytes, other methods and session ids. Returns (requests tried, those answered 5xx)."""
    with httpx.Client(base_url=url, timeout=120) as http:
        names = [m["name"] for m in http.get("/v1/models").json()["models"]]
        live = http.post("/v1/sessions", json={}).json().get("session", "none")
        endpoints = {**bodies(names), f"/v1/sessions/{live}/utterances": TURN}
        requests = (
            st.sampled_from(list(endpoints)).flatmap(lambda path: endpoints[path].map(lambda body: ("POST", path, encoded(body))))
            | st.tuples(st.sampled_from(["POST", "PUT"]), st.sampled_from([*endpoints, "/v1/models", "/"]), st.binary(max_size=64))
            | st.tuples(st.sampled_from(["GET", "DELETE", "POST"]),
                        st.text(st.characters(codec="utf-8"), max_size=20).map(lambda s: f"/v1/sessions/{quote(s, safe='')}"),
                        st.just(b""))
        )
        tried, failures = [0], []

        @seed(seed_value)
        @settings(max_examples=examples, phases=[Phase.generate], database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(requests)
        def send(request) -> None:
            method, path, body = request
            answer = http.request(method, path, content=body, headers={"content-type": "application/json"})
            tried[0] += 1
            if answer.status_code >= 500:
                failures.append({"method": method, "path": path, "body": body[:300].decode("utf-8", "replace"),
                                 "status": answer.status_code, "answer": answer.text[:300]})

        send()
    return tried[0], failures


# -- the command ------------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(checkpoints: Sequence[str], threads: int, max_sessions: int,
                 options: Sequence[str] = ()) -> tuple[subprocess.Popen, str]:
    """``turnformer serve`` in its own process on a free port of 127.0.0.1 (with its other `options`), once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "turnformer.cli", "-q", "--threads", str(threads), "serve", "--port", str(port),
               "--max-sessions", str(max_sessions), *options, *[a for c in checkpoints for a in ("--checkpoint", c)]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if process.poll() is not None:
            raise SystemExit(f"turnformer serve ended: {process.stderr.read()}")
        try:
            httpx.get(f"{url}/v1/health", timeout=1)
            return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("turnformer serve did not answer within 2 minutes")


def describe(model: LoadedModel) -> dict:
    run = model.run
    return {"name": model.name, "task": model.task.name, "model": run["recipe"]["model"], "dataset": run["recipe"].get("dataset"),
            "backbone": run["recipe"].get("backbone"), "seed": run.get("seed"), "limits": run.get("limits"),
            "epochs": run["recipe"].get("train", {}).get("epochs"),
            "results": model.info()["results"]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--utterances", type=int, default=20)
    parser.add_argument("--fuzz", type=int, default=1000)
    parser.add_argument("--time-cap", type=float, default=600.0, help="Seconds at most for each timed part.")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        models = load_models(args.checkpoint)
    except (DialogueError, CheckpointError) as e:  # not a run folder, no checkpoint, one that does not load
        parser.error(f"--checkpoint: {e}")
    first = next(m for m in models.values() if STREAM in m.serves)
    conversations = conversations_of(first, args.sessions, args.utterances)
    process, url = start_server(args.checkpoint, args.threads, max(1000, args.sessions))
    load_before = os.getloadavg()[0]  # the machine's other work, which the timings share its cores with
    try:
        measured = measure(models, conversations, args.time_cap, url)
        tried, failures = fuzz(url, args.fuzz)
    finally:
        process.terminate()
        process.wait(timeout=30)
    recipe = first.run["recipe"]
    record = make_result(
        "serve-load", task="serve", dataset=recipe.get("dataset"), split="test", model="+".join(m["model"] for m in map(describe, models.values())),
        backbone=recipe.get("backbone"), metric="utterances_per_second", scores=[measured["server"]["utterances_per_s"]],
        seeds=[first.run.get("seed", 0)], config={"sessions": args.sessions, "utterances": args.utterances, "fuzz": args.fuzz,
                                                  "time_cap_s": args.time_cap, "threads": args.threads,
                                                  "checkpoints": [describe(m) for m in models.values()]},
        extra={**measured, "fuzz_requests": tried, "fuzz_5xx": len(failures), "fuzz_failures": failures[:10],
               "target": "127.0.0.1 only", "server_process": "turnformer serve, in a process of its own",
               "load_average_before": load_before, "load_average_after": os.getloadavg()[0]},
        command="python benchmarks/serve_load.py " + " ".join(sys.argv[1:] if argv is None else argv),
    )
    path = write_result(record)
    print(json.dumps({k: record["extra"][k] for k in ("answered", "in_order", "identical_to_in_process", "overhead_ratio",
                                                      "throughput_ratio", "fuzz_requests", "fuzz_5xx", "partial")}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
