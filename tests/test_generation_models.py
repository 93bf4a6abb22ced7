"""The Transformer response generator, its batches, training, decoding and commands (tiny sizes)."""

import json
import sys

import pytest
import torch
from typer.testing import CliRunner

from turnformer.cli import app
from turnformer.data import load_split, write_jsonl
from turnformer.dialogue import Dialogue, DialogueError, next_speaker
from turnformer.models.transformer_generator import IGNORE, GeneratorConfig, TransformerGenerator
from turnformer.tasks.generation import (EOU, SOU, SPEAKER_R, Vocabulary, build_generator, encode_instance, encode_instances,
                                         make_generation_batches, make_instances)

from _benchmark_scripts import load_benchmark_script
from _generation_checks import (assert_learns_its_training_responses, assert_loss_projects_only_the_targets_as_the_full_logits_would,
                                id_settings, train_on_files_from_the_command_line)

runner = CliRunner()

DIALOGUES = [
    Dialogue.from_turns([("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?"), ("A", "fine too , thanks .")], id="d1"),
    Dialogue.from_turns([("A", "where are you going ?"), ("B", "to the bank ."), ("A", "see you later ."),
                         ("B", "see you !")], id="d2"),
]


def tiny(vocab: Vocabulary, **settings) -> TransformerGenerator:
    torch.manual_seed(0)
    config = GeneratorConfig(vocab_size=len(vocab), d_model=16, heads=2, layers=1, ff=32, dropout=0.0, **settings)
    return TransformerGenerator(config, pad_id=0, eou_id=vocab.index[EOU]).eval()


@pytest.fixture
def vocab_and_batch():
    vocab = Vocabulary.build(DIALOGUES, min_count=1)
    encoded = [encode_instance(x, vocab) for x in make_instances(DIALOGUES)]
    (batch,) = make_generation_batches(encoded, 8)
    return vocab, encoded, batch


def test_instance_encoding_shifts_the_response_and_skips_the_speaker_token():
    vocab = Vocabulary.build(DIALOGUES, min_count=1)
    instance = make_instances(DIALOGUES)[1]  # d1: context "hi ...", "fine , thanks . and you ?"; response "fine too ..."
    context, turns, response_in, target, roles, heads = encode_instance(instance, vocab)
    assert turns == [2] * (len(instance.context[0].words) + 3) + [1] * (len(instance.context[1].words) + 3)
    assert response_in[:2] == [vocab.index[SOU], vocab.index[SPEAKER_R]]
    assert target[0] == IGNORE and target[-1] == vocab.index[EOU] and target[1:-1] == vocab.encode(instance.response.words)
    # d1's turns: A, B, A: the context's first utterance is the responder's own (R), the second the partner's (Q)
    assert roles == [2] * (len(instance.context[0].words) + 3) + [1] * (len(instance.context[1].words) + 3) and heads is None
    plain_in, plain_target = encode_instance(instance, vocab, speaker_tokens=False)[2:4]
    assert plain_in[0] == vocab.index[SOU] and plain_target[:-1] == vocab.encode(instance.response.words)


@pytest.mark.parametrize("model_id", ["transformer", "phaed", "phaed-no-recurrence", "gpt2-scratch"])
def test_the_loss_projects_only_the_targets_with_the_full_logits_loss_and_gradients(vocab_and_batch, model_id):
    vocab, _, batch = vocab_and_batch
    torch.manual_seed(0)
    settings = {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "dropout": 0.0, **id_settings(model_id)}
    assert_loss_projects_only_the_targets_as_the_full_logits_would(build_generator(model_id, settings, vocab), batch)


def test_loss_is_token_cross_entropy_and_the_decoder_is_causal(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    model = tiny(vocab)
    logits = model(batch)
    kept = batch.response_out.ne(IGNORE)
    manual = -torch.log_softmax(logits, -1)[kept].gather(1, batch.response_out[kept][:, None]).mean()
    assert torch.allclose(model.loss(batch), manual, atol=1e-6)
    nll, count = model.negative_log_likelihood(batch)
    assert count == int(kept.sum()) and nll == pytest.approx(float(manual.detach()) * count, rel=1e-5)
    # changing the last response token changes nothing before it
    changed = batch.response_in.clone()
    changed[:, -1] = vocab.index["bank"]
    batch2 = type(batch)(batch.context, batch.context_turn, changed, batch.response_out)
    assert torch.allclose(model(batch2)[:, :-1], logits[:, :-1], atol=1e-5)


def test_batches_group_similar_contexts_then_similar_responses():
    # 64 instances: contexts of 20-23 tokens (one length step), responses of 2..65 tokens in shuffled order
    responses = torch.randperm(64, generator=torch.Generator().manual_seed(0)).tolist()
    encoded = [([5] * (20 + i % 4), [1] * (20 + i % 4), [3] * (2 + r), [4] * (2 + r), [1] * (20 + i % 4), None)
               for i, r in enumerate(responses)]
    batches = make_generation_batches(encoded, 16)
    assert sorted(int(b.response_in.ne(0).sum(1).max()) for b in batches) == [17, 33, 49, 65]  # each 16 in a row
    assert sum(len(b) for b in batches) == 64 and all(b.context.shape[1] <= 23 for b in batches)
    by_context = sorted(encoded, key=lambda row: len(row[0]))  # an exact sort by context alone pads far more
    padded = lambda rows: sum(len(rows[i:i + 16]) * max(len(r[2]) for r in rows[i:i + 16]) for i in range(0, 64, 16))  # noqa: E731
    assert sum(b.response_in.numel() for b in batches) == padded(sorted(encoded, key=lambda row: len(row[2]))) < padded(by_context)


def test_padding_does_not_change_an_example(vocab_and_batch):
    vocab, encoded, _ = vocab_and_batch
    model = tiny(vocab)
    alone = make_generation_batches(encoded[:1], 1)[0]
    together = make_generation_batches(encoded, 8, sort_by_length=False)[0]  # padded to the longest
    length = alone.response_in.shape[1]
    assert torch.allclose(model(alone)[0], model(together)[0, :length], atol=1e-5)


def test_greedy_decoding_follows_the_argmax_and_stops_at_eou(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    model = tiny(vocab, max_response_words=6)
    out = model.generate(batch)
    assert len(out) == len(batch) and all(len(o) <= 7 for o in out)
    assert all(vocab.index[EOU] not in o and 0 not in o for o in out)
    # step by step for the first example
    memory, padding = model.encode(batch)
    ids = batch.response_in[:1, :2]
    for expected in out[0]:
        step = model.decode((memory[:1], padding[:1]), ids)[0, -1]
        step[model.unsaid_ids()] = float("-inf")
        assert int(step.argmax()) == expected
        ids = torch.cat([ids, torch.tensor([[expected]])], 1)
    assert out == model.generate(batch)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_reply_never_holds_a_special_token_but_unk(vocab_and_batch, beam):
    """A small model said [SPEAKER-R] at every step: decoded, an empty reply that also ran to the last step."""
    vocab, _, batch = vocab_and_batch
    model = tiny(vocab, max_response_words=6)
    favoured = [vocab.index[token] for token in (SOU, SPEAKER_R, "[SPEAKER-Q]", "[PAD]")]
    assert model.unsaid_ids() == sorted(favoured)  # [UNK] stands for a word, [EOU] ends the reply
    steps = model.stepper

    def biased(state):
        inner = steps(state)

        class Biased:
            def __call__(self, ids):
                logits = inner(ids).clone()
                logits[:, favoured] += 1e4
                return logits

            def reorder(self, rows):
                inner.reorder(rows)
        return Biased()

    model.stepper = biased
    out = model.generate(batch, beam_size=beam)
    assert all(len(o) == 7 and not set(o) & set(favoured) for o in out), out  # words to the last step, none special


def test_a_tiny_generator_learns_its_training_responses(vocab_and_batch):
    vocab, _, batch = vocab_and_batch
    assert_learns_its_training_responses(tiny(vocab), batch, steps=150)


def test_config_checks_and_next_speaker():
    with pytest.raises(ValueError, match="divisible"):
        GeneratorConfig(vocab_size=10, d_model=10, heads=3)
    with pytest.raises(ValueError, match="unknown GeneratorConfig settings"):
        GeneratorConfig.from_dict({"vocab_size": 10, "depth": 2})
    assert next_speaker(DIALOGUES[0]) == "B"
    assert next_speaker(Dialogue.from_turns([("A", "hello"), ("A", "anyone ?")])) == "A's partner"
    vocab = Vocabulary.build(DIALOGUES, min_count=1)
    model = tiny(vocab, max_positions=8)
    (batch,) = make_generation_batches([encode_instance(x, vocab) for x in make_instances(DIALOGUES)], 8)
    with pytest.raises(ValueError, match="max_positions = 8"):
        model(batch)


@pytest.mark.parametrize("config_class", ["phaed", "dialogbert", "smollm2"])
def test_every_true_or_false_setting_refuses_anything_else(config_class):
    """A setting such as ``model_config.transformer_attention="yes"`` (or 1) is named, not read as true."""
    from dataclasses import fields

    from turnformer.models.dialogbert import DialogBERTConfig
    from turnformer.models.phaed import PHAEDConfig
    from turnformer.models.smollm2 import SmolLM2Config

    config = {"phaed": PHAEDConfig, "dialogbert": DialogBERTConfig, "smollm2": SmolLM2Config}[config_class]
    required = {} if config is SmolLM2Config else {"vocab_size": 10}
    switches = [f.name for f in fields(config) if f.type in ("bool", bool)]
    assert len(switches) >= 2
    for name in switches:
        for bad in ("yes", 1):
            with pytest.raises(ValueError, match=f"model_config.{name} = {bad!r}: expected true or false"):
                config(**required, **{name: bad})
        assert getattr(config(**required, **{name: True}), name) is True


@pytest.mark.data
def test_train_evaluate_generate_on_dailydialog(data_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--data-dir", str(data_dir)]
    trained = runner.invoke(app, ["train", "--task", "generation", "--model", "transformer", "--dataset", "dailydialog",
                                  "--limit-dialogues", "40", "--set", "model_config.d_model=32", "--set", "model_config.ff=64",
                                  "--set", "model_config.layers=1", "--set", "train.epochs=2", "--set", "train.warmup_steps=2",
                                  "--out", str(out), *common])
    assert trained.exit_code == 0, trained.output
    result = json.loads((out / "result.json").read_text())
    first, second = (h for h in result["history"] if "validation" in h)
    assert second["validation"]["perplexity"] < first["validation"]["perplexity"]  # it learns
    assert result["best_epoch"] == 2
    assert {"bleu_2", "distinct_2", "perplexity"} <= set(second["test"]) and "bleu_2" not in second["validation"]
    # the summary shows perplexity as itself, not the negated score runs are ranked by
    assert result["metric"] == "perplexity" and result["validation_at_best"] == second["validation"]["perplexity"] > 1
    assert result["test_at_best"] == second["test"]["perplexity"]

    scored = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--split", "test", "--limit-dialogues", "5", *common])
    assert scored.exit_code == 0, scored.output
    metrics = json.loads(scored.stdout)
    assert {"perplexity", "bleu_1", "bleu_4", "distinct_1", "distinct_2"} <= set(metrics) and metrics["perplexity"] > 1
    five = tmp_path / "five.jsonl"  # the same five conversations from a file of one's own: the same scores
    write_jsonl(load_split("dailydialog", "test", data_dir).dialogues[:5], five)
    from_file = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(five)])
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout) == metrics
    # utterances longer than the model reads (data.max_words = 50) are counted and said, as the other tasks' are
    wordy = tmp_path / "wordy.jsonl"
    wordy.write_text(json.dumps({"turns": [{"speaker": "A", "text": "hello " * 60}, {"speaker": "B", "text": "yes " * 70},
                                           {"speaker": "A", "text": "fine ."}]}) + "\n")
    scored_wordy = runner.invoke(app, ["evaluate", "--checkpoint", str(out), "--input", str(wordy)])
    assert scored_wordy.exit_code == 0 and json.loads(scored_wordy.stdout)["truncated_utterances"] == 2, scored_wordy.output
    assert "2 utterance(s) longer than data.max_words = 50 words are read as their first 50" in " ".join(scored_wordy.output.split())

    conversations = tmp_path / "c.jsonl"
    conversations.write_text("".join(json.dumps({"id": d.id, "turns": [{"speaker": t.speaker, "text": t.text} for t in d.turns]}) + "\n"
                                     for d in DIALOGUES))
    replies = tmp_path / "replies.jsonl"
    generated = runner.invoke(app, ["generate", "--checkpoint", str(out), "--input", str(conversations), "--out", str(replies)])
    assert generated.exit_code == 0, generated.output
    rows = [json.loads(line) for line in replies.read_text().splitlines()]
    assert [(r["id"], r["speaker"]) for r in rows] == [("d1", "B"), ("d2", "A")] and all(isinstance(r["response"], str) for r in rows)
    assert [r["truncated"] for r in rows] == [False, False]
    long_one = tmp_path / "long.jsonl"  # more turns than the model reads: the row and a note say so
    long_one.write_text(json.dumps({"id": "long", "turns": [{"speaker": "AB"[i % 2], "text": "hi"} for i in range(6)]}) + "\n")
    cut = runner.invoke(app, ["generate", "--checkpoint", str(out), "--input", str(long_one), "--out", "-"])
    assert cut.exit_code == 0 and json.loads(cut.stdout.splitlines()[-1])["truncated"] is True
    assert "note: the model read only part of 1 conversation(s): long (its last 4 of 6 turns)" in " ".join(cut.output.split())

    chat = runner.invoke(app, ["generate", "--checkpoint", str(out)], input="hello !\nhow are you ?\n\n")
    assert chat.exit_code == 0 and chat.output.count("bot>") == 2, chat.output
    # a line the model cannot take (a zero-width space alone, spaces alone: they ended the chat, unsaid; an undecodable
    # byte) is refused, and the chat goes on
    bad = runner.invoke(app, ["generate", "--checkpoint", str(out)],
                        input=b"hello !\n\xe2\x80\x8b\n   \ncaf\xe9\nhow are you ?\n\n")
    assert bad.exit_code == 0 and bad.output.count("bot>") == 2 and bad.output.count("error:") == 3, bad.output
    assert bad.output.count("that line has no visible text") == 2 and "not valid Unicode" in bad.output, bad.output
    assert "byte 0xe9 is not UTF-8" in bad.output  # the byte named, not the surrogate Python decoded it to
    # the model replies as --speaker; a line longer than it reads is said; --out without --input is refused, not ignored
    named = runner.invoke(app, ["generate", "--checkpoint", str(out), "--speaker", "Bob"], input="hi " * 60 + "\n\n")
    assert named.exit_code == 0 and named.output.count("Bob>") == 1 and "bot>" not in named.output, named.output
    assert "note: that line is longer than the model reads (1 of its turns cut to its first 50 words)" in named.output
    for options, message in ((["--out", str(tmp_path / "chat.jsonl")], "without --input, generate chats on the terminal"),
                             (["--speaker", "user"], "the chat's user is 'user'"),
                             # a name that is "user" once its invisible end is read off, as the turns' speakers are
                             (["--speaker", "user\u200b"], "the chat's user is 'user'"),
                             (["--speaker", "\u200b"], "empty; give a name")):
        refused = runner.invoke(app, ["generate", "--checkpoint", str(out), *options], input="hi\n\n")
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), refused.output
    assert not (tmp_path / "chat.jsonl").exists()
    # what the chat's model refuses (SmolLM2 and --beam 2) was a traceback: the session was built past the error handling
    from turnformer.tasks import generation as generation_task

    def refuses(self, model, vocab, run, beam=1):
        raise ValueError(f"SmolLM2Generator replies greedily: beam search (beam_size {beam}) is for the word generators")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(type(generation_task.TASK), "session", refuses)
        beam = runner.invoke(app, ["generate", "--checkpoint", str(out), "--beam", "2"], input="hi\n\n")
    assert beam.exit_code == 2 and beam.output.startswith("error: SmolLM2Generator replies greedily"), beam.output

    wrong = runner.invoke(app, ["predict", "--checkpoint", str(out), "--input", str(conversations)])
    assert wrong.exit_code != 0 and "turnformer generate" in wrong.output


@pytest.mark.parametrize("model_id", ["transformer-dra", "dialogbert-dra", "phaed", "gpt2-scratch"])
def test_every_generator_trains_and_replies_from_the_command_line(model_id, tmp_path, monkeypatch):
    """On the user's own conversation files: a model without a file recipe of its own uses its benchmark
    recipe with the files; DRA models parse with spaCy into a cache under TURNFORMER_CACHE."""
    monkeypatch.setenv("TURNFORMER_CACHE", str(tmp_path / "cache"))
    conversations, out = train_on_files_from_the_command_line(model_id, DIALOGUES, tmp_path)
    run = json.loads((out / "run.json").read_text())
    assert run["recipe"]["model"] == model_id and run["recipe"]["dataset"] == "file"
    replies = tmp_path / "replies.jsonl"
    generated = runner.invoke(app, ["generate", "--checkpoint", str(out), "--input", str(conversations), "--out", str(replies)])
    assert generated.exit_code == 0, generated.output
    assert len(replies.read_text().splitlines()) == len(DIALOGUES)
    if model_id.endswith("-dra"):
        assert any((tmp_path / "cache").rglob("*.sqlite"))


def test_generator_takes_turns_in_every_form_and_checks_the_speakers(vocab_and_batch):
    from turnformer.tasks.generation import ResponseGenerator

    vocab = vocab_and_batch[0]
    bot = ResponseGenerator(tiny(vocab), vocab, 4, 50)
    pairs = [("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?")]
    mappings = [{"speaker": s, "text": t} for s, t in pairs]
    assert bot.respond(pairs) == bot.respond(mappings) == bot.respond(Dialogue.from_turns(pairs))
    with pytest.raises(DialogueError, match="speakers: expected a list of 2 speakers"):
        bot.respond_all([pairs, pairs], ["A"])


def test_replies_are_ordinary_text_made_of_the_models_words(vocab_and_batch):
    """`respond` glues punctuation back and capitalises what the model says in lower-cased words; `reply_words` gives
    the words themselves (what the metrics score)."""
    from turnformer.data.generation_vocab import detokenize
    from turnformer.tasks.generation import ResponseGenerator

    vocab = vocab_and_batch[0]
    bot = ResponseGenerator(tiny(vocab), vocab, 4, 50)
    pairs = [("A", "hi , how are you ?"), ("B", "fine , thanks . and you ?")]
    (said,) = bot.reply_words([pairs])
    assert said and bot.respond(pairs) == detokenize(said)
    assert detokenize(["well", ",", "i", "don't", "know", ".", "and", "you", "?"]) == "Well, I don't know. And you?"
    assert detokenize(["i'm", "sure", "it", "will", "be", "."]) == "I'm sure it will be."
    with pytest.raises(DialogueError, match=r"dialogue: turns\[1\]: expected a \(speaker, text\) pair"):
        bot.respond([("A", "hi"), "ok"])


def test_a_reply_speaker_is_read_without_the_spaces_around_it(vocab_and_batch):
    """As a turn's speaker is read: " A " is A, whose earlier turns are then the responder's own (role R)."""
    from turnformer.dialogue import as_dialogue
    from turnformer.tasks.generation import ResponseGenerator, reply_instance, replier

    vocab = vocab_and_batch[0]
    bot = ResponseGenerator(tiny(vocab), vocab, 4, 50)
    pairs = [("A", "coffee ?"), ("B", "yes , please ."), ("A", "here you are ."), ("B", "thanks . how much ?")]
    dialogue = as_dialogue(pairs)
    assert replier(dialogue, " A ") == "A" and replier(dialogue, None) == replier(dialogue, "  ") == "A"
    assert [u.role for u in reply_instance(dialogue, replier(dialogue, " A ")).context] == ["R", "Q", "R", "Q"]
    assert bot.reply_words([pairs], [" A "]) == bot.reply_words([pairs], ["A"])
    numbered = as_dialogue([(1, "coffee ?"), (2, "yes , please .")])  # a numeric speaker id, as a turn takes it
    assert replier(numbered, 1) == "1" and bot.respond(numbered, speaker=1) == bot.respond(numbered, speaker="1")
    for bad in (1.5, ["A"]):
        with pytest.raises(DialogueError, match=r"speaker: expected a speaker's name \(a string\), got"):
            bot.respond(numbered, speaker=bad)


@pytest.mark.parametrize("model_id", ["transformer", "gpt2-scratch"])
def test_a_context_over_the_models_positions_is_cut_to_its_newest_turns_and_said(vocab_and_batch, model_id, caplog):
    """A run trained with many context turns replies to a long conversation (its kept turns over max_positions) from
    the newest turns that fit, as a shorter context would be read, and says what it left out; training batches the same."""
    from turnformer.tasks.generation import ResponseGenerator, instance_batches, reply_instance

    vocab = vocab_and_batch[0]
    torch.manual_seed(0)
    model = build_generator(model_id, {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "dropout": 0.0,
                                       "max_positions": 40, "max_response_words": 10}, vocab).eval()
    pairs = [("A" if i % 2 else "B", "where are you going ? to the bank .") for i in range(12)]  # 12 turns of 9 words
    bot = ResponseGenerator(model, vocab, max_context_turns=12, max_words=50)
    instance = reply_instance(Dialogue.from_turns(pairs), "B", 12, 50)
    fitted = model.fit_context(instance)
    window = model.context_window(10)
    assert window == (40 if model_id == "transformer" else 40 - 10 - 2)
    whole = window // (9 + 3)  # [SOU] [SPEAKER] 9 words [EOU]
    assert fitted.context == instance.context[-whole:]  # the newest turns that fit, whole
    newest = Dialogue.from_turns(pairs[-whole:])  # what the model reads, as a conversation of its own
    assert bot.reply_words([pairs], ["B"]) == ResponseGenerator(model, vocab, 12, 50).reply_words([newest], ["B"])
    assert bot.unread(pairs, "B") == f"{whole} of the 12 turns it reads, to fit model_config.max_positions = 40"
    assert bot.unread(pairs[-2:], "B") is None and model.fit_context(model.fit_context(instance)) == fitted
    # one turn longer than the whole window: its first words that fit
    long = reply_instance(Dialogue.from_turns([("A", " ".join(["word"] * 60))]), "B", 12, 50)
    assert [len(u.words) for u in model.fit_context(long).context] == [window - 3]
    with caplog.at_level("INFO", logger="turnformer"):
        (batch,) = instance_batches(model, [instance, fitted], vocab, 8)
    assert "1 of 2 instances: the context cut to its newest turns, to fit model_config.max_positions = 40" in caplog.text
    assert torch.equal(batch.context[0], batch.context[1]) and batch.context.shape[1] <= window
    model.negative_log_likelihood(batch)  # within the positions


@pytest.mark.parametrize("model_id, settings", [("dialogbert", {}), ("transformer-dra", {"dra_layers": 1}),
                                                ("phaed", {"inter_layers": 1})])
def test_models_whose_positions_count_within_an_utterance_read_the_whole_context(vocab_and_batch, model_id, settings):
    """DialogBERT, DRA's encoder (no positions) and PHAED have no window over the whole context: nothing is cut."""
    from turnformer.tasks.generation import reply_instance

    vocab = vocab_and_batch[0]
    model = build_generator(model_id, {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_positions": 20, **settings}, vocab)
    instance = reply_instance(Dialogue.from_turns([("A" if i % 2 else "B", "where are you going ?") for i in range(6)]), "B", 6)
    assert model.context_window(50) is None and model.fit_context(instance) is instance


@pytest.mark.parametrize("model_id, settings, highest", [("transformer", {}, 6), ("phaed", {}, 4),
                                                         ("phaed", {"turn_count": "conversation"}, 4)])
def test_turns_past_max_turns_are_said(vocab_and_batch, model_id, settings, highest, caplog):
    """The turn embeddings stop at max_turns: a context whose turns go past it is said in the log and in `unread`."""
    from turnformer.tasks.generation import ResponseGenerator, instance_batches, reply_instance

    vocab = vocab_and_batch[0]
    pairs = [("A" if i % 2 else "B", "where are you going ?") for i in range(6)]
    instance = reply_instance(Dialogue.from_turns(pairs), "B", 6)  # context B A B A B A: 3 queries, 3 earlier responses
    assert instance.response_turn == 4
    for max_turns, capped in ((highest - 1, True), (highest, False)):
        model = build_generator(model_id, {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_turns": max_turns,
                                           **settings}, vocab)
        assert model.highest_turn(instance) == highest and model.turns_capped(instance) == capped
        said = ResponseGenerator(model, vocab, 6, 50).unread(pairs, "B")
        assert said == (f"its turns past the {max_turns}th as the {max_turns}th (model_config.max_turns: the turn embeddings "
                        "stop there)" if capped else None)
        caplog.clear()
        with caplog.at_level("INFO", logger="turnformer"):
            instance_batches(model, [instance], vocab, 8)
        assert (f"1 of 1 instances: turns past the {max_turns}th share one turn embedding" in caplog.text) == capped


def test_marks_are_glued_to_the_words_they_belong_to():
    """DailyDialog's apostrophes stand apart ("I ’ m"), and so do brackets, currency and quotes in `words`: the reply
    text joins them as written text does, and reads back as the same words."""
    from turnformer.data.generation_vocab import detokenize, words

    cases = {"I ’ m sorry , but I ’ m not sure .": "I’m sorry, but I’m not sure.",
             "it ’ s ( see below ) 5 % off": "It’s (see below) 5% off",
             'he said " hello " and " bye " .': 'He said "hello" and "bye".',
             "it costs $ 5 , [ not # 6 ] .": "It costs $5, [not #6].",
             "the students ' books": "The students ' books"}  # an apostrophe not in a contraction stays apart
    for text, written in cases.items():
        assert detokenize(words(text)) == written
        assert words(written) == words(text)


def test_the_samples_page_takes_each_model_from_the_first_folder_and_suffix_that_holds_it(tmp_path, monkeypatch):
    """benchmarks/generation_samples.py over several run folders: a model's row is its run in the first folder and
    suffix (in the order given) holding a best checkpoint, and names that run's experiment."""
    samples = load_benchmark_script("generation_samples")
    for model_id, folder, suffix in (("transformer", "a", "-full"), ("gpt2-scratch", "b", "-cpu"), ("transformer", "b", "-cpu")):
        (tmp_path / f"{folder}-{model_id}").mkdir()
        _, out = train_on_files_from_the_command_line(model_id, DIALOGUES, tmp_path / f"{folder}-{model_id}")
        run = tmp_path / folder / f"generation-dailydialog-{model_id}{suffix}" / "seed1"
        run.parent.mkdir(parents=True)
        out.rename(run)
    docs = tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(sys, "argv", ["generation_samples.py", "--runs-dir", str(tmp_path / "a"), str(tmp_path / "b"),
                                      "--suffix=-full", "--suffix=-cpu", "--out", str(docs)])
    samples.main()
    page = (docs / "generation-samples.md").read_text()
    rows = [line.split(" | ")[:2] for line in page.splitlines() if line.startswith("| transformer |") or line.startswith("| gpt2")]
    assert rows == [["| transformer", "generation-dailydialog-transformer-full"], ["| gpt2-scratch", "generation-dailydialog-gpt2-scratch-cpu"]] * 2
    assert "--suffix=-full --suffix=-cpu" in page and (docs / "generation-attention-dra.png").exists()
    monkeypatch.setattr(sys, "argv", ["generation_samples.py", "--runs-dir", str(tmp_path / "a"), "--suffix=-none"])
    with pytest.raises(SystemExit, match=r"no trained generator: no .*/generation-dailydialog-MODEL\{-none\}/seed1 holds a best/"):
        samples.main()


@pytest.mark.parametrize("settings", [{}, {"speaker_tokens": False, "turn_embeddings": False}, {"layers": 3}])
def test_the_gpt2_decoders_cached_steps_give_the_logits_of_decoding_the_whole_sequence(settings):
    """Greedy decoding reads one new token a step, against kept keys and values: at every step the logits equal
    `decode` over the whole context and response, for contexts of other lengths in one batch, beside rows already
    ended (pads appended; their logits are not read), and greedy decoding and beam search give the replies that
    decoding the whole sequence at each step gives."""
    from turnformer.models.generator_base import WholeSteps
    from turnformer.models.gpt2_generator import CachedSteps

    dialogues = [*DIALOGUES, Dialogue.from_turns([("A", "ok .")], id="d3"),
                 Dialogue.from_turns([("A", "a " * 30 + "."), ("B", "b ."), ("A", "c .")], id="d4")]
    vocab = Vocabulary.build(dialogues, min_count=1)
    (batch,) = make_generation_batches([encode_instance(x, vocab, speaker_tokens=settings.get("speaker_tokens", True))
                                        for x in make_instances(dialogues)], 16, sort_by_length=False)
    assert len(set(batch.context.ne(0).sum(1).tolist())) > 3  # contexts of several lengths, padded
    torch.manual_seed(0)
    model = build_generator("gpt2-scratch", {"d_model": 16, "heads": 2, "layers": 2, "ff": 32, "dropout": 0.0,
                                             "max_response_words": 12, **settings}, vocab).eval()
    state = model.encode(batch)
    steps, response = CachedSteps(model, state), model._response_prefix(batch)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t in range(10):
            live = response[:, -1].ne(0)  # an ended row's logits are not read
            assert torch.allclose(steps(response)[live], model.decode(state, response, last_only=True)[live], atol=1e-5), t
            token = torch.randint(4, len(vocab), (len(batch),), generator=generator)
            token[: t // 3] = 0  # the first rows "ended": pads from here on
            response = torch.cat([response, token[:, None]], 1)
        with pytest.raises(ValueError, match="one token longer"):
            steps(response[:, :-1])
    cached = [model.generate(batch, beam_size=beam) for beam in (1, 3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(model), "stepper", lambda self, state: WholeSteps(self, state))
        assert [model.generate(batch, beam_size=beam) for beam in (1, 3)] == cached
    assert any(len(reply) > 3 for reply in cached[0]) and cached[1] != cached[0]


@pytest.mark.parametrize("model_id, settings", [("transformer", {}), ("transformer-dra", {}), ("dialogbert", {}),
                                               ("dialogbert-dra", {}), ("phaed", {}), ("phaed", {"c_max": 0}),
                                               ("phaed", {"turn_count": "conversation", "turn_attention": False}),
                                               ("phaed", {"response_turn_embedding": False}),
                                               ("phaed", {"cross_attention": "queries"})])
def test_the_encoder_decoders_cached_steps_give_the_logits_of_decoding_the_whole_response(model_id, settings):
    """The encoder-decoders (the Transformer, DialogBERT, each with DRA; PHAED, with and without its memory of earlier
    responses) decode one new token a step against kept self-attention keys and values and the context's (and PHAED's
    memory's) keys and values projected once: at every step the logits equal `decode` over the whole response, rows
    already ended too (a pad sees nothing either way), and greedy decoding and beam search give the replies of
    decoding the whole response at each step."""
    from turnformer.models.generator_base import WholeSteps

    class ChainParser:  # stands in for spaCy: each word governed by the one before it
        def parse_many(self, texts):
            pass

        def __call__(self, words):
            return [i - 1 for i in range(len(words))]

    dialogues = [*DIALOGUES, Dialogue.from_turns([("A", "ok .")], id="d3"),
                 Dialogue.from_turns([("A", "a " * 30 + "."), ("B", "b ."), ("A", "c .")], id="d4")]
    vocab = Vocabulary.build(dialogues, min_count=1)
    torch.manual_seed(0)
    model = build_generator(model_id, {"d_model": 16, "heads": 2, "layers": 2, "ff": 32, "dropout": 0.0,
                                       "max_response_words": 12, **settings}, vocab).eval()
    (batch,) = make_generation_batches(encode_instances(make_instances(dialogues), vocab, model, parser=ChainParser()), 16,
                                       sort_by_length=False)
    assert len(set(batch.context.ne(0).sum(1).tolist())) > 3  # contexts of several lengths, padded
    state = model.encode(batch)
    steps, response = model.stepper(state), model._response_prefix(batch)
    assert not isinstance(steps, WholeSteps)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t in range(10):
            assert torch.allclose(steps(response), model.decode(state, response, last_only=True), atol=1e-5), t
            token = torch.randint(4, len(vocab), (len(batch),), generator=generator)
            token[: t // 3] = 0  # the first rows "ended": pads from here on
            response = torch.cat([response, token[:, None]], 1)
        with pytest.raises(ValueError, match="one token longer"):
            steps(response[:, :-1])
    cached = [model.generate(batch, beam_size=beam) for beam in (1, 3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(model), "stepper", lambda self, state: WholeSteps(self, state))
        assert [model.generate(batch, beam_size=beam) for beam in (1, 3)] == cached
    assert any(len(reply) > 3 for reply in cached[0]) and cached[1] != cached[0]


def test_replies_that_reach_the_last_step_without_ending_are_said(vocab_and_batch, tmp_path, monkeypatch):
    """A reply cut at the decoder's last step (max_response_words words and one, no end of turn) was written as if the
    model had ended it: generate says which."""
    from turnformer.tasks.generation import ResponseGenerator, generate_replies

    vocab = vocab_and_batch[0]
    conversations = tmp_path / "c.jsonl"
    write_jsonl(DIALOGUES, conversations)
    model = tiny(vocab, max_response_words=3)
    bot = ResponseGenerator(model, vocab)
    # what greedy decoding gives when [EOU] never wins: max_response_words + 1 tokens; here the first a special one,
    # which the reply's words leave out (counted in words, the reply seemed finished)
    you, fine, stop = (vocab.index[word] for word in ("you", "fine", "."))
    monkeypatch.setattr(type(model), "generate", lambda self, batch, max_words=None, beam_size=1:
                        [[vocab.index[SOU], you, you, you], [fine, stop]])
    replies = generate_replies(model, vocab, {"recipe": {}}, str(conversations))
    rows = replies.rows()  # made once: the rows come as the blocks are made
    assert [r["response"] for r in rows] == ["You you you", "Fine."]
    assert [r["unfinished"] for r in rows] == [True, False]  # in the rows written too, not only in the note
    assert replies.notes == ["note: 1 reply(ies) reached the model's last step (3 words and one) without ending, cut "
                             "there: d1"]


def test_empty_replies_in_a_file_are_said(vocab_and_batch, tmp_path, monkeypatch):
    """A reply the model ended at once was written as "" without a word (the chat says it)."""
    from turnformer.tasks.generation import ResponseGenerator, generate_replies

    vocab = vocab_and_batch[0]
    conversations = tmp_path / "c.jsonl"
    write_jsonl(DIALOGUES, conversations)
    monkeypatch.setattr(ResponseGenerator, "replies", lambda self, dialogues, speakers=None: [([], False), (["fine", "."], False)])
    replies = generate_replies(tiny(vocab), vocab, {"recipe": {}}, str(conversations))
    assert [r["response"] for r in replies.rows()] == ["", "Fine."]
    assert replies.notes == ["note: 1 reply(ies) are empty: the model ended them at once: d1"]


def test_full_width_and_spanish_marks_are_glued_as_written():
    from turnformer.data.generation_vocab import detokenize, words

    cases = {"你好，你今天怎么样？": "你好，你今天怎么样？", "（注意）「引用」": "（注意）「引用」",
             "¿qué tal?": "¿Qué tal?", "¡hola! ¿cómo estás?": "¡Hola! ¿Cómo estás?"}
    for text, written in cases.items():
        assert detokenize(words(text)) == written
        assert words(written) == words(text)


def test_what_words_split_inside_a_written_word_is_joined_again():
    """`words` splits numbers, hyphenated words and addresses at their marks; a reply shows them whole, and reads back as
    the same words. A mark between words stays apart."""
    from turnformer.data.generation_vocab import detokenize, words

    cases = {"it costs $ 3 . 50 , ok ?": "It costs $3.50, ok?",
             "at 7 : 30 , 10 , 000 people came": "At 7:30, 10,000 people came",
             "send an e - mail to a @ b . com or see www . google . com .": "Send an e-mail to a@b.com or see www.google.com.",
             "a 24 - hour store": "A 24-hour store",
             "one , two . 5 people": "One, two. 5 people",
             "is it 3 , 45 ?": "Is it 3, 45?",
             "in 1990 , 100 people came ; 1 , 000 , 000 more": "In 1990, 100 people came; 1,000,000 more",
             "at 7 : 30 p . m . in the u . s . a . is it ? write to a . b @ c . com": "At 7:30 p.m. in the u.s.a. is it? Write to a.b@c.com",
             "i saw plan b . then i left": "I saw plan b. Then I left"}
    for text, written in cases.items():
        assert detokenize(words(text)) == written
        assert words(written) == words(text)
