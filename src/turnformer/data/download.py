"""Download a benchmark from its source repository at a pinned commit, and verify it.

Each dataset folder has a manifest in ``turnformer/data/manifests/<folder>.json`` naming the source
repository and commit, the files to fetch (raw GitHub URLs at that commit, or a zip/tar archive and
which of its members go where), and the checksums of the result:

* ``"verify": "files"``: a SHA-256 and size per file (the small datasets);
* ``"verify": "tree"``: for datasets of thousands of files (SwDA, MuTual), one tree digest: the
  SHA-256 of the sorted lines ``"<relative/posix/path> <sha256 of the file>\\n"``, plus the file count.

`download` fetches everything into a temporary folder inside the data directory, verifies it, and only
then moves the finished folder into place; on any failure it removes what it fetched and raises
`DownloadError`, so no half-written dataset is ever left behind. The fetch function is a parameter
(``fetch(url, dest_path)``), so tests can exercise the whole path without a network.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable

from turnformer.data.locate import resolve_data_dir
from turnformer.data.registry import get_info
from turnformer.data.report import DownloadError

Fetch = Callable[[str, Path], None]
MANIFEST_DIR = Path(__file__).resolve().parent / "manifests"
CHUNK = 1 << 20


# ----------------------------------------------------------------------------------------- digests
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def list_files(folder: Path) -> list[str]:
    """Relative POSIX paths of all regular files under `folder`, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def tree_digest(folder: Path, files: Iterable[str]) -> str:
    """SHA-256 over the sorted lines ``"<relative path> <sha256>\\n"`` of `files` under `folder`."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel} {sha256_file(folder / rel)}\n".encode("utf-8"))
    return h.hexdigest()


def matches(rel: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(rel, pat) for pat in patterns)


def selected_files(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """The files of `folder` that the manifest covers."""
    if manifest["verify"] == "files":
        return sorted(manifest["files"])
    return [rel for rel in list_files(folder) if matches(rel, manifest["include"])]


# ---------------------------------------------------------------------------------------- manifests
def manifest_of(info) -> dict[str, Any]:
    """The manifest of a registry dataset; a corpus fetched by hand (no manifest) says how to get it."""
    if info.manual_download:
        raise DownloadError(f"{info.name} cannot be downloaded by turnformer (no pinned manifest). {info.manual_download}")
    return load_manifest(info.folder)


def load_manifest(folder: str) -> dict[str, Any]:
    path = MANIFEST_DIR / f"{folder}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DownloadError(f"no download manifest for {folder!r} ({path.name} is not installed)") from None


def compute_checksums(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The checksum part of a manifest for the files in `folder` (used to write the manifests)."""
    if manifest["verify"] == "files":
        return {"files": {rel: {"sha256": sha256_file(folder / rel), "size": (folder / rel).stat().st_size}
                          for rel in sorted(manifest["files"])}}
    files = selected_files(folder, manifest)
    return {"file_count": len(files), "tree_sha256": tree_digest(folder, files)}


def verify_folder(folder: Path, manifest: dict[str, Any]) -> None:
    """Raise `DownloadError` unless `folder` holds exactly the manifest's files with its checksums."""
    folder = Path(folder)
    name = manifest.get("folder", folder.name)
    if manifest["verify"] == "files":
        bad = []
        for rel, want in sorted(manifest["files"].items()):
            path = folder / rel
            if not path.is_file():
                bad.append(f"{rel}: missing")
                continue
            got = sha256_file(path)
            if got != want["sha256"]:
                bad.append(f"{rel}: sha256 {got[:12]}..., expected {want['sha256'][:12]}...")
        if bad:
            raise DownloadError(f"{name}: checksum verification failed: " + "; ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""))
        return
    files = selected_files(folder, manifest)
    if len(files) != manifest["file_count"]:
        raise DownloadError(f"{name}: checksum verification failed: {len(files)} files, expected {manifest['file_count']}")
    got = tree_digest(folder, files)
    if got != manifest["tree_sha256"]:
        raise DownloadError(f"{name}: checksum verification failed: tree digest {got[:12]}..., expected {manifest['tree_sha256'][:12]}...")


def verify(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Check an existing copy of dataset `name` against its manifest; returns its folder."""
    info = get_info(name)
    manifest = manifest_of(info)
    folder = resolve_data_dir(data_dir) / info.folder
    if not folder.is_dir():
        raise DownloadError(f"{info.name}: {folder} {'is a file, not a folder' if folder.exists() else 'does not exist'}")
    verify_folder(folder, manifest)
    return folder


# ------------------------------------------------------------------------------------------ fetching
def urllib_fetch(url: str, dest: Path) -> None:
    """Default fetch: stream `url` to `dest` with urllib."""
    req = urllib.request.Request(url, headers={"User-Agent": "turnformer-data-download"})
    with urllib.request.urlopen(req, timeout=60) as resp, open(dest, "wb") as out:
        shutil.copyfileobj(resp, out, CHUNK)


def _safe_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise DownloadError(f"refusing unsafe path {rel!r} in archive or manifest")
    return p.as_posix()


def _write(staging: Path, rel: str, data: bytes | None = None, src: Path | None = None) -> None:
    dest = staging / _safe_rel(rel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src is not None:
        shutil.copyfile(src, dest)
    else:
        dest.write_bytes(data or b"")


def _map_member(member: str, mapping: dict[str, str]) -> str | None:
    for prefix, target in mapping.items():
        if prefix.endswith("/"):
            if member.startswith(prefix) and len(member) > len(prefix):
                return target + member[len(prefix):]
        elif member == prefix:
            return target
    return None


def _unpack_zip(archive: Path, take: dict[str, str], staging: Path, url: str) -> None:
    """Extract the members whose base name is a value of `take` to the keys' paths."""
    try:
        with zipfile.ZipFile(archive) as zf:
            by_base: dict[str, list[zipfile.ZipInfo]] = {}
            for zi in zf.infolist():
                if not zi.is_dir() and "__MACOSX" not in zi.filename:
                    by_base.setdefault(PurePosixPath(zi.filename).name, []).append(zi)
            for dest, base in take.items():
                found = by_base.get(base, [])
                if len(found) != 1:
                    raise DownloadError(f"{url}: expected one member named {base!r} in the zip, found {len(found)}")
                _write(staging, dest, zf.read(found[0]))
    except zipfile.BadZipFile as err:
        raise DownloadError(f"{url}: not a valid zip file ({err})") from None


def _unpack_tar(archive: Path, mapping: dict[str, str], include: list[str], staging: Path, url: str) -> None:
    """Extract regular files (first path component, the archive's top folder, dropped) mapped by prefix."""
    try:
        with tarfile.open(archive, mode="r:*") as tf:
            for member in tf:
                if not member.isfile():
                    continue
                parts = PurePosixPath(member.name).parts
                if len(parts) < 2:
                    continue
                rel = _map_member("/".join(parts[1:]), mapping)
                if rel is None or not matches(rel, include):
                    continue
                fh = tf.extractfile(member)
                if fh is None:
                    continue
                with fh:
                    _write(staging, rel, fh.read())
    except tarfile.TarError as err:
        raise DownloadError(f"{url}: not a valid tar archive ({err})") from None


def _fetch_sources(manifest: dict[str, Any], fetch: Fetch, raw: Path, staging: Path) -> None:
    for i, source in enumerate(manifest["sources"]):
        url = source["url"]
        dest = raw / f"source-{i}"
        try:
            fetch(url, dest)
        except DownloadError:
            raise
        except Exception as err:  # network errors, HTTP errors...
            raise DownloadError(f"could not fetch {url}: {err}") from err
        if not dest.is_file():
            raise DownloadError(f"could not fetch {url}: nothing was written")
        if "path" in source:
            _write(staging, source["path"], src=dest)
        elif "unzip" in source:
            _unpack_zip(dest, source["unzip"], staging, url)
        elif "untar" in source:
            _unpack_tar(dest, source["untar"], manifest["include"], staging, url)
        else:
            raise DownloadError(f"manifest source {i}: needs 'path', 'unzip' or 'untar'")
        dest.unlink()


def download(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    fetch: Fetch | None = None,
    force: bool = False,
    manifest: dict[str, Any] | None = None,
    announce: Callable[[], None] | None = None,
) -> Path:
    """Fetch dataset `name` into the data directory, verify it, and return its folder.

    An existing folder that verifies is kept as is; one that does not is an error unless `force`
    (then it is replaced, only once the new download has verified). ``mutual`` and ``mutual-plus``
    share the ``mutual/`` folder and one download. `announce` is called when a download begins (not for a copy kept).
    """
    info = get_info(name)
    manifest = manifest if manifest is not None else manifest_of(info)
    fetch = fetch or urllib_fetch
    root = resolve_data_dir(data_dir)
    target = root / info.folder
    if target.exists() and not force:
        try:
            verify_folder(target, manifest)
        except DownloadError as err:
            raise DownloadError(f"{target} exists but does not match the pinned files ({err}); pass --force to replace it") from None
        return target
    made = [folder for folder in (root, *root.parents) if not folder.exists()]  # what this call creates, deepest first
    if announce is not None:
        announce()
    root.mkdir(parents=True, exist_ok=True)
    try:
        return _download_into(root, target, info.folder, manifest, fetch)
    except BaseException:
        for folder in made:  # a failed or interrupted download leaves no empty folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def _download_into(root: Path, target: Path, folder: str, manifest: dict[str, Any], fetch: Fetch) -> Path:
    """`download`'s fetch into a temporary folder under `root`, verified, then moved to `target` (an earlier copy there
    replaced only then)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder}.download-", dir=root))
    try:
        raw, staging = tmp / "raw", tmp / "staging"
        raw.mkdir()
        staging.mkdir()
        _fetch_sources(manifest, fetch, raw, staging)
        verify_folder(staging, manifest)
        backup = None
        if target.exists():
            backup = tmp / "previous"
            target.rename(backup)
        try:
            staging.rename(target)
        except BaseException:
            if backup is not None and not target.exists():
                backup.rename(target)  # put the old copy back
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def describe(name: str) -> str:
    """One line: where dataset `name` is downloaded from."""
    info = get_info(name)
    m = manifest_of(info)
    return f"{info.name}: {m['repository']} at {m['commit']} ({m.get('license', info.license)})"
