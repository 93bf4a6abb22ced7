"""What requests carry, in the generic JSONL shapes (a turn is ``{"speaker", "text"}``; a speaker may be an integer id,
as in conversation files), and the server's limits on them. Pydantic checks the types (FastAPI answers 422 naming
the field); `conversation` and `candidate_turns` then check the limits and build the library's `Dialogue` and
`Turn`, whose own checks (an empty text, a lone surrogate) name the field too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Sequence

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr

from turnformer.dialogue import Dialogue, DialogueError, Turn, as_turn, is_blank, next_speaker, speaker_name


@dataclass(frozen=True)
class Limits:
    """What one request, and the server's memory, may hold."""

    max_body_bytes: int = 1 << 20  # a request's body
    body_seconds: float = 30.0  # a request's body must have arrived this long after the request began
    max_text_chars: int = 2000  # an utterance's text
    max_name_chars: int = 100  # a speaker's name, a conversation's id
    max_turns: int = 200  # turns of a conversation sent in one request
    max_candidates: int = 20  # candidate replies to rank
    max_beam: int = 8  # generation's beam size
    max_sessions: int = 1000  # live sessions; the least recently used is evicted to make room for a new one
    idle_seconds: float = 1800.0  # a session unused this long expires
    max_session_turns: int = 1000  # utterances one session takes
    max_waiting: int = 16  # calls waiting for one model; another is a 503 (a streamed utterance always waits)

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"{name} = {value!r}: must be above 0")

    def for_clients(self) -> dict:
        """What a client may send, and how long a session lives (`GET /v1/models`)."""
        shown = ("max_body_bytes", "max_text_chars", "max_name_chars", "max_turns", "max_candidates", "max_beam",
                 "max_sessions", "idle_seconds", "max_session_turns")
        return {name: getattr(self, name) for name in shown}


def _int_speaker(value: Any) -> Any:
    """An integer speaker id as its string, as conversation files are read (a bool stays a type error)."""
    return str(value) if type(value) is int else value


Speaker = Annotated[StrictStr, BeforeValidator(_int_speaker)]


class TurnIn(BaseModel):
    """A turn of the generic JSONL format: its labels and id are read past, and a field the format has not is kept
    aside, to be named in the answer (`ignored_fields`), as a file's are counted in its load report."""

    model_config = ConfigDict(extra="allow")
    speaker: Speaker = Field(examples=["Ross"])
    text: StrictStr = Field(examples=["We were on a break!"])
    labels: Any = None
    id: Any = None
    emotion: Any = None
    act: Any = None
    sentiment: Any = None


class UtteranceIn(TurnIn):
    """A session's next utterance: a turn of the generic JSONL format (its labels and id read past), nothing else (a
    request's field sent here, `models` among them, is refused rather than silently left out)."""

    model_config = ConfigDict(extra="forbid")


class CandidateIn(BaseModel):
    """A candidate reply: a text (spoken by the next speaker) or a turn (its other fields as a turn's)."""

    model_config = ConfigDict(extra="allow")
    speaker: Speaker | None = None
    text: StrictStr
    labels: Any = None
    id: Any = None


def _text_candidate(value: Any) -> Any:
    return {"text": value} if isinstance(value, str) else value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently left out


class NewSession(Strict):
    models: list[StrictStr] | None = Field(None, description="Models to run on each utterance (default: every model "
                                           "that streams).", examples=[["meld", "swda"]])


class AnnotateIn(Strict):
    id: StrictStr | None = None
    models: list[StrictStr] | None = Field(None, description="Models that label (default: all that can).")
    turns: list[TurnIn]


class RankIn(Strict):
    model: StrictStr | None = Field(None, description="The ranking model (default: the only one loaded).")
    turns: list[TurnIn]
    candidates: list[Annotated[CandidateIn, BeforeValidator(_text_candidate)]] = Field(
        examples=[["Why?", {"speaker": "Rachel", "text": "See you at the cinema!"}]])


class GenerateIn(Strict):
    model: StrictStr | None = Field(None, description="The generator (default: the only one loaded).")
    turns: list[TurnIn]
    speaker: Speaker | None = Field(None, description="Who replies (default: the speaker before the last one).")
    beam: StrictInt = Field(1, ge=1, description="Beam size (1: greedy).")


class AttentionIn(Strict):
    model: StrictStr | None = Field(None, description="A DialogXL model (default: the only one loaded).")
    turns: list[TurnIn]
    utterance: StrictInt | None = Field(None, description="The utterance whose [CLS] query is shown (default: the last).")


def check_name(value: str | None, where: str, limits: Limits) -> None:
    if value is not None and len(value) > limits.max_name_chars:
        raise DialogueError(f"{where}: {len(value)} characters; at most {limits.max_name_chars}")
    if value is not None and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DialogueError(f"{where}: not valid Unicode ({e.reason} at character {e.start})") from None


def checked_speaker(value: str | None, where: str, limits: Limits) -> str | None:
    """A speaker's name a request gives apart from its turns (None: left to the model)."""
    if value is None:
        return None
    check_name(value, where, limits)
    if is_blank(value):
        raise DialogueError(f"{where}: empty; give a name, or leave it out")
    return speaker_name(value)  # as a turn's speaker is read


def ignored_fields(**parts: Sequence[BaseModel] | None) -> dict[str, list[str]]:
    """``{"ignored_fields": [...]}`` naming every field of the turns or candidates in `parts` (by the request's field
    name) that their format has not (``turns[2].emotoin``), read past as a file's are; {} where there is none."""
    names = [f"{part}[{i}].{key}" for part, items in parts.items() for i, item in enumerate(items or ())
             for key in (item.model_extra or {})]
    return {"ignored_fields": names} if names else {}


def checked_turn(turn: TurnIn | CandidateIn, where: str, limits: Limits, default_speaker: str | None = None) -> Turn:
    """The library's `Turn` of a request's turn, within the limits; an error names ``where`` and the field (``where``
    empty: the turn is the whole body, its fields named alone)."""
    prefix = f"{where}." if where else ""
    if len(turn.text) > limits.max_text_chars:
        raise DialogueError(f"{prefix}text: {len(turn.text)} characters; at most {limits.max_text_chars}")
    check_name(turn.speaker, f"{prefix}speaker", limits)
    speaker = turn.speaker if turn.speaker is not None else default_speaker
    return as_turn({"speaker": speaker, "text": turn.text}, where)


def conversation(turns: Sequence[TurnIn], limits: Limits, id: str | None = None) -> Dialogue:
    """The conversation a request's ``turns`` hold: at least one, at most ``max_turns``."""
    if not turns:
        raise DialogueError("turns: empty; give at least one {\"speaker\", \"text\"} turn")
    if len(turns) > limits.max_turns:
        raise DialogueError(f"turns: {len(turns)} turns; at most {limits.max_turns} in one request")
    if id is not None and is_blank(id):
        raise DialogueError("id: empty; leave it out, or give the conversation a name")
    check_name(id, "id", limits)
    return Dialogue(tuple(checked_turn(t, f"turns[{i}]", limits) for i, t in enumerate(turns)), id=id)


def candidate_turns(candidates: Sequence[CandidateIn], dialogue: Dialogue, limits: Limits) -> list[Turn]:
    """The candidate replies of a ranking request, each a `Turn` (a bare text spoken by the next speaker)."""
    if not candidates:
        raise DialogueError("candidates: empty; give at least one candidate reply")
    if len(candidates) > limits.max_candidates:
        raise DialogueError(f"candidates: {len(candidates)}; at most {limits.max_candidates} in one request")
    reply = next_speaker(dialogue)
    return [checked_turn(c, f"candidates[{i}]", limits, reply) for i, c in enumerate(candidates)]
