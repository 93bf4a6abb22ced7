"""Reading files so that every failure names the file and the line (1-based) at fault; writing them whole."""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterable, Iterator

from turnformer.data.report import DataNotFoundError, LoadReport
from turnformer.dialogue import DialogueError

BOM = "\ufeff"


def output_name(path: Path | str) -> str:
    """An --out as a message names it: ``-`` is standard output."""
    return "standard output" if str(path) == "-" else str(path)


def check_output_file(path: Path, what: str = "") -> Path:
    """Fail, naming the path, where a file cannot be written: a folder in its place, a file where one of its folders
    should be, a folder it may not write in. Creates nothing (the writers make the missing folders when they write, so
    a command refused afterwards leaves none behind); returns the path. `what` (an option's name) heads the message."""
    path = Path(path)
    if str(path) == "-":  # standard output
        return path
    head = f"{what} {path}" if what else str(path)
    if path.is_dir():
        raise DialogueError(f"{head}: a folder; give a file name, e.g. {path / ('out' + (path.suffix or '.jsonl'))}")
    blocking = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise DialogueError(f"{head}: {blocking} is a file, not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise DialogueError(f"{head}: cannot be written: Permission denied")
    # a file (or the first missing folder) really made there and removed, as the writers make one beside the path and
    # rename it: a read-only or foreign folder fails here, not after the work
    folder = path.parent if path.parent.is_dir() else next(p for p in path.parents if p.is_dir())
    try:
        if folder == path.parent:
            fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".probe.", dir=folder))
    except OSError as error:
        made = "a file" if folder == path.parent else "a folder"
        raise DialogueError(f"{head}: cannot be written: {error.strerror or error} (making {made} in {folder}, as the "
                            "writers do)") from None
    return path


def write_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole: to a temporary file in the same folder, then renamed over `path`, so a crash
    never leaves half a file. ``-`` is standard output. A path that is a link or not a regular file (``/dev/stdout``,
    a named pipe) is written through as it is: renaming over it would put a file in its place. A name ending in
    ``.gz`` is written gzip-compressed, as the readers read such a name. A failure (a full disk, a folder gone) is an
    OSError naming the path."""
    write_chunks(path, [data])


def write_chunks(path: Path, chunks: Iterable[bytes]) -> int:
    """`write_file` for data made a piece at a time (predictions of a long file, a block of conversations at a time):
    each chunk is written as it comes, so the whole is never held; `path` appears, whole, only after the last one, and
    an error or an interrupt while the chunks are made leaves `path` as it was. Returns the bytes written (before
    compression)."""
    path = Path(path)
    if str(path) == "-":
        total = 0
        for chunk in chunks:  # each shown as soon as it is made
            write_all(sys.stdout.buffer, chunk)
            total += len(chunk)
        return total
    try:
        return _write(path, chunks)
    except _NotWriting as making:  # the chunks' maker failed (reading its input, say): its own error, not the file's
        raise making.error from None
    except OSError as error:
        raise cannot_write(path, error) from None


class OutputClosed(Exception):
    """Standard output was closed by its reader (``| head``): not an error of the command's (nor an OSError, which
    commands report as one); the command line ends quietly on it."""


def write_all(stream, data: bytes) -> None:
    """Write all of `data` to `stream` and flush it. An unbuffered stream (PYTHONUNBUFFERED) writes once and may take
    only part (a pipe whose reader stops): the rest is written, not dropped. A reader gone is `OutputClosed`."""
    view = memoryview(data)
    try:
        while view:
            written = stream.write(view)
            view = view[len(view) if written is None else written:]
        stream.flush()
    except BrokenPipeError:
        raise OutputClosed() from None


def cannot_write(path: Path, error: OSError) -> OSError:
    """`error` (a full disk, a folder gone) as one line naming the file that was being written."""
    failure = OSError(f"{path}: cannot be written: {error.strerror or error}")
    failure.errno = error.errno
    return failure


def usual_permissions(path) -> None:
    """Give a file the permissions a new file gets from this process's umask (0644 under 022): a writer that makes
    it 0600 (mkstemp, safetensors) would keep others sharing a run or an output from reading it."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def _write(path: Path, chunks: Iterable[bytes]) -> int:
    compress = path.name.endswith(".gz")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        with open(path, "wb") as fh:
            return _write_to(fh, chunks, compress)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        usual_permissions(tmp)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            total = _write_to(fh, chunks, compress)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return total
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class PartialOutput:
    """A file made a block at a time that an interruption does not waste: the blocks go to ``NAME.partial``, each on
    disk before the next is made, and are counted in ``NAME.partial.json`` with `key` (what made them: the command,
    its input and model files, its options) and what the maker carries from block to block; ``NAME`` appears, whole,
    after the last block. Started again with the same key, the blocks already on disk are kept (`kept`) and the
    writing goes on after them; with another key, or none recorded, it starts anew. A name ending in ``.gz`` gets
    each block as a gzip member of its own (a gzip file of several members reads as one)."""

    def __init__(self, path: Path, key: dict):
        self.path, self.key = Path(path), json.loads(json.dumps(key))  # as the record reads it back
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.record = self.path.with_name(self.path.name + ".partial.json")
        self.blocks = self.rows = self.bytes = 0

    @staticmethod
    def usable(path: Path) -> bool:
        """Whether `path` is a regular file's name (or nothing yet): standard output, a link or a device are written
        through as they are (`write_chunks`), with nothing kept."""
        path = Path(path)
        return str(path) != "-" and not path.is_symlink() and (path.is_file() or not path.exists())

    def kept(self) -> Any:
        """What an interrupted run with the same key left to go on from: the state its maker carried (None where there
        is nothing to go on from); `blocks`, `rows` and `bytes` say how much."""
        try:
            record = json.loads(self.record.read_text(encoding="utf-8"))
            if record["key"] != self.key or self.partial.stat().st_size < record["bytes"]:
                return None
            self.blocks, self.rows, self.bytes = int(record["blocks"]), int(record["rows"]), int(record["bytes"])
            os.truncate(self.partial, self.bytes)  # a block written but not recorded is made again
            return record["state"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def kept_rows(self) -> Iterator[dict]:
        """The rows of the blocks `kept` found, read back from the partial file (for a maker that rebuilds what it
        carries from them rather than saving it with each block)."""
        return (json.loads(line) for _, line in iter_lines(self.partial))

    def write(self, blocks: Iterable[tuple[bytes, int]], state: Any) -> None:
        """Append `blocks` ((bytes, rows) each) after the kept ones, recording each with ``state()`` once it is on
        disk; then ``NAME`` in place of the partial file. An error (not an interrupt), in making a block or in writing
        it, removes the partial file, leaving things as they were; an interrupt keeps it, to go on from."""
        compress = self.path.name.endswith(".gz")
        fh, made = None, iter(blocks)
        try:
            while True:
                try:
                    data, rows = next(made)
                except StopIteration:
                    break
                except OSError as error:
                    raise _NotWriting(error) from None
                if fh is None:  # opened with the first block: an interrupt before it leaves no empty partial file
                    fh = self._open()
                fh.write(gzip.compress(data, mtime=0) if compress else data)
                fh.flush()
                os.fsync(fh.fileno())
                self.blocks, self.rows, self.bytes = self.blocks + 1, self.rows + rows, fh.tell()
                _write(self.record, [json.dumps({"key": self.key, "blocks": self.blocks, "rows": self.rows,
                                                  "bytes": self.bytes, "state": state()}).encode("utf-8")])
            (fh or self._open()).close()  # no block at all: an empty file
            os.replace(self.partial, self.path)
            self.record.unlink(missing_ok=True)
        except _NotWriting as making:
            self.discard()
            raise making.error from None
        except OSError as error:  # a full disk, say
            self.discard()
            raise cannot_write(self.path, error) from None
        except Exception:
            self.discard()
            raise
        finally:
            if fh is not None:
                fh.close()

    def _open(self):
        """The partial file, at the end of the kept blocks (the folder made if missing)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.partial, "r+b" if self.blocks else "wb")
        fh.truncate(self.bytes)
        fh.seek(self.bytes)
        return fh

    def discard(self) -> None:
        self.partial.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)


class _NotWriting(Exception):
    """An OSError raised while a chunk was made, carried past the handler that names the file being written."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


def _write_to(fh, chunks: Iterable[bytes], compress: bool) -> int:
    total, chunks = 0, iter(chunks)
    with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") if compress else nullcontext(fh) as out:
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except OSError as error:
                raise _NotWriting(error) from None
            out.write(chunk)
            total += len(chunk)
    return total


GZIP_MAGIC = b"\x1f\x8b"
NUL_HINT = "; the line holds NUL bytes: the file looks like UTF-16 or binary, not UTF-8 text (save it as UTF-8)"


def check_regular(path: Path) -> None:
    """Refuse a pipe, FIFO or device given as an input file: its format is told from its first bytes and then it is
    read again, which a pipe cannot do (its data would be lost, a FIFO wait for a writer that has gone). A path
    that does not exist, or a folder, is left to the reader to name."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise DialogueError(f"{path}: not a regular file (a pipe or a device): save the conversations to a file and "
                            "give its path")


def not_found(path: Path) -> DataNotFoundError:
    """A missing file's error; where a compressed copy lies beside it, the message names it."""
    gz = path.with_name(path.name + ".gz")
    beside = f"; {gz.name} is there: decompress it (gunzip), a benchmark's files are read by their own names" \
        if gz.is_file() else ""
    return DataNotFoundError(f"{path}: file not found{beside}")


def read_bytes(path: Path) -> bytes:
    """The file's bytes; a gzip-compressed file (told by its first bytes, whatever its name) decompressed."""
    path = Path(path)
    check_regular(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise not_found(path) from None
    except IsADirectoryError:
        raise DialogueError(f"{path}: is a directory, expected a file") from None
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DialogueError(f"{path}: a gzip file that cannot be decompressed ({e})") from None
        if raw.startswith(GZIP_MAGIC):
            raise twice_compressed(path)
    return raw


def twice_compressed(path: Path) -> DialogueError:
    return DialogueError(f"{path}: compressed twice: what gzip decompresses is gzip again (decompress it once, e.g. "
                         "`gunzip`, and give the file of text inside, compressed once or not at all)")


def folder_names(folder: Path) -> list[str]:
    """The names in `folder`; a folder that cannot be read is an error (a glob would find none in it)."""
    try:
        return os.listdir(folder)
    except PermissionError:
        raise DialogueError(f"{folder}: Permission denied") from None


def text_files(folder: Path) -> list[Path]:
    """The ``*.txt`` files of `folder`."""
    return [folder / name for name in folder_names(folder) if name.endswith(".txt")]


def first_line(path: Path) -> str:
    """The first line that is not blank (a byte-order mark removed, gzip decompressed), to tell a file's format
    without reading all of it; "" for a file of blank lines."""
    check_regular(path)
    try:
        with open(path, "rb") as f:
            opener = gzip.open if f.read(2) == GZIP_MAGIC else open
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as f:
            return next((line for line in f if line.strip()), "")
    except (OSError, EOFError, zlib.error):
        return ""  # the reader that follows names the fault


def _decode_error(path: Path, raw: bytes, err: UnicodeDecodeError, line_offset: int = 0) -> DialogueError:
    line = raw.count(b"\n", 0, err.start) + 1 + line_offset
    col = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
    bad = raw[err.start : err.end]
    utf16 = line_offset == 0 and raw.startswith((b"\xff\xfe", b"\xfe\xff"))  # UTF-16's byte order mark
    said = "the file is UTF-16 (its byte order mark): save it as UTF-8" if utf16 else f"the file must be UTF-8 ({err.reason})"
    return DialogueError(f"{path}:{line}: undecodable bytes {bad!r} at column {col}: {said}")


def decode_utf8(raw: bytes, path: Path, report: LoadReport | None = None, line_offset: int = 0) -> str:
    """Decode UTF-8 strictly; a bad byte raises `DialogueError` naming the file and line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _decode_error(path, raw, err, line_offset) from None
    if text.startswith(BOM) and line_offset == 0:
        text = text[1:]
        if report is not None:
            report.add("bom_removed", f"{path}:1: UTF-8 byte order mark removed")
    return text


def read_text(path: Path, report: LoadReport | None = None) -> str:
    return decode_utf8(read_bytes(path), path, report)


def iter_lines(path: Path, report: LoadReport | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` with line numbers from 1, splitting on ``\\n`` only, a line at a time (a file
    of any size is never held whole; a gzip-compressed one, told by its first bytes, is decompressed as it is read).

    A trailing ``\\r`` is removed (CRLF files); a ``\\r`` anywhere else is an error naming the line (the lines of a
    file whose lines end in ``\\r`` alone would be read as one). The empty piece after a final newline is not a line.
    Other separators (U+2028, form feed...) stay inside lines: ``str.splitlines`` would split on them. A last line
    without a line break is read and counted (``no_final_line_break``: a file cut short ends so).
    """
    path = Path(path)
    check_regular(path)
    try:
        with open(path, "rb") as probe:
            compressed = probe.read(2) == GZIP_MAGIC
        fh = gzip.open(path, "rb") if compressed else open(path, "rb")
    except FileNotFoundError:
        raise not_found(path) from None
    except IsADirectoryError:
        raise DialogueError(f"{path}: is a directory, expected a file") from None
    with fh:
        i, ended = -1, True
        try:
            for i, piece in enumerate(fh):  # binary lines end at b"\n" only
                if i == 0 and compressed and piece.startswith(GZIP_MAGIC):
                    raise twice_compressed(path)
                ended = piece.endswith(b"\n")
                piece = piece.removesuffix(b"\n").removesuffix(b"\r")
                if (cr := piece.find(b"\r")) >= 0:
                    raise DialogueError(
                        f"{path}:{i + 1}: a carriage return (\\r) inside the line, at byte {cr + 1}: lines end in \\n or "
                        "\\r\\n (a file whose lines end in \\r alone: convert its line ends)"
                    )
                try:
                    line = piece.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise _decode_error(path, piece, err, line_offset=i) from None
                if i == 0 and line.startswith(BOM):
                    line = line[1:]
                    if report is not None:
                        report.add("bom_removed", f"{path}:1: UTF-8 byte order mark removed")
                yield i + 1, line
            if not ended and report is not None and line.strip():
                report.add("no_final_line_break", f"{path}:{i + 1}: the last line has no line break: read as it is (a "
                                                  "file cut short would end so)")
        except (OSError, EOFError, zlib.error) as e:
            if not compressed:
                raise
            where = f"after line {i + 1}" if i >= 0 else "in its first line"
            raise DialogueError(f"{path}: a gzip file that cannot be decompressed {where} ({e})") from None


def json_error(path: Path, err: json.JSONDecodeError, line_offset: int = 0) -> DialogueError:
    return DialogueError(f"{path}:{err.lineno + line_offset}: {json_fault(err)}")


def json_fault(err: json.JSONDecodeError) -> str:
    """What is wrong, and where on its line: Python's "Unterminated string starting at" ends where its column was."""
    return f"malformed JSON (column {err.colno}): {err.msg.removesuffix(' at')}"


class ConstantError(ValueError):
    """NaN or Infinity in a JSON text: Python's reader takes them, JSON has them not."""


# a JSON string (skipped whole), or a constant outside every string
_CONSTANT_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|(NaN|-?Infinity)', re.S)


def constant_at(text: str) -> str:
    """Where the first NaN or Infinity outside a string stands in `text`: ``LINE (column COL)``."""
    for found in _CONSTANT_OR_STRING.finditer(text):
        if found.group(1):
            start = found.start(1)
            return f"{text.count(chr(10), 0, start) + 1} (column {start - text.rfind(chr(10), 0, start)})"
    return "?"


def _no_constant(name: str) -> None:
    raise ConstantError(f"{name} is not a JSON value (write null, or a number)")


class DuplicateKeyError(ValueError):
    """A key twice in one JSON object: JSON readers keep the last value and lose the first."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused where a key appears twice: JSON readers keep the last value and lose the first."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(f"the key {key!r} appears twice in one object (a JSON reader would keep only the last)")
        obj[key] = value
    return obj


def duplicate_key_at(text: str) -> tuple[int, int] | None:
    """Where the first key that appears twice in one object of `text` has its second value: (line, column), from 1;
    None where not found. Python's fast reader says not where: `text` is read again by its pure-Python scanner (slower,
    only for the message), each object's value starts recorded as its members are read."""
    class Found(Exception):
        """The second value's start: raised through the scanner (which reads a StopIteration as a value missing)."""

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None, _w=None, _ws=None):
        starts: list[int] = []

        def scan(string: str, index: int):
            starts.append(index)
            return scan_once(string, index)

        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan, None, list, memo)
        keys: set[str] = set()
        for (key, _), start in zip(pairs, starts):
            if key in keys:
                raise Found(start)
            keys.add(key)
        return dict(pairs), end

    decoder = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int)
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
        return None
    except Found as found:
        start = found.args[0]
    except (ValueError, RecursionError):
        return None
    return text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)


def _int(digits: str) -> int:
    """An integer, refused (rather than Python's advice on its limits) where it is too long to read."""
    if len(digits.lstrip("-")) > sys.get_int_max_str_digits():
        raise ValueError(f"a number of {len(digits.lstrip('-'))} digits is too long to read")
    return int(digits)


def read_json(text: str | bytes) -> Any:
    """One JSON document, refused (ValueError, json.JSONDecodeError among them) where JSON readers disagree or lose
    something: a key twice in one object, NaN or Infinity, an integer too long to read."""
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_object, parse_int=_int)


def load_json(path: Path, report: LoadReport | None = None) -> Any:
    """Parse a whole-file JSON document (`read_json`: a key twice in one object, NaN, an integer too long to read are
    refused); errors name the file, line and column."""
    text = read_text(path, report)
    try:
        return read_json(text)
    except json.JSONDecodeError as err:
        raise json_error(path, err) from None
    except ConstantError as err:  # Python's reader says not where: found again, outside the strings
        raise DialogueError(f"{path}:{constant_at(text)}: {err}") from None
    except DuplicateKeyError as err:  # nor here: read again, where each value starts recorded
        at = duplicate_key_at(text)
        raise DialogueError(f"{path}:{at[0]} (column {at[1]}): {err}" if at else f"{path}: {err}") from None
    except ValueError as err:
        raise DialogueError(f"{path}: {err}") from None
    except RecursionError:
        raise DialogueError(f"{path}: JSON nested too deeply to be read") from None


def display(path: Path, root: Path | None) -> str:
    """A path for report messages: relative to the dataset folder when possible (stable, no machine paths)."""
    if root is not None:
        try:
            return Path(path).relative_to(root).as_posix()
        except ValueError:
            pass
    return str(path)
