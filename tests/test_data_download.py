"""Downloads, verified against pinned checksums, with a fake fetch function (never the network)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnformer.data import DownloadError, load_split
from turnformer.data.cli import data_app
from turnformer.data.download import (
    MANIFEST_DIR,
    compute_checksums,
    download,
    load_manifest,
    tree_digest,
    verify_folder,
)
from turnformer.data.registry import DATASETS

FILES = {
    "train_data.json": b'[[{"text": "Hi", "speaker": "Ross", "label": "Joyful"}]]',
    "dev_data.json": b'[[{"text": "Yo", "speaker": "Joey", "label": "Mad"}]]',
    "test_data.json": b'[[{"text": "Hey", "speaker": "Monica", "label": "Sad"}]]',
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_manifest(files=FILES) -> dict:
    return {
        "folder": "emorynlp", "repository": "example/repo", "commit": "0" * 40, "verify": "files",
        "sources": [{"url": f"https://example.invalid/{name}", "path": name} for name in files],
        "files": {name: {"sha256": sha(data), "size": len(data)} for name, data in files.items()},
    }


class FakeRemote:
    """fetch(url, dest) serving bytes from a dict; records the URLs asked for."""

    def __init__(self, served: dict[str, bytes]):
        self.served = served
        self.calls: list[str] = []

    def __call__(self, url: str, dest: Path) -> None:
        self.calls.append(url)
        if url not in self.served:
            raise OSError(f"404 for {url}")
        dest.write_bytes(self.served[url])


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_files_download_verifies_and_loads(tmp_path):
    remote = FakeRemote({f"https://example.invalid/{n}": d for n, d in FILES.items()})
    announced = []
    folder = download("emorynlp", tmp_path, fetch=remote, manifest=files_manifest(), announce=lambda: announced.append(1))
    assert folder == tmp_path / "emorynlp" and announced == [1]
    assert leftovers(tmp_path) == ["emorynlp"]
    assert load_split("emorynlp", "dev", tmp_path)[0][0].text == "Yo"
    # Already there and verified: nothing is fetched again, and no download is announced.
    remote.calls.clear()
    announced.clear()
    assert download("emorynlp", tmp_path, fetch=remote, manifest=files_manifest(), announce=lambda: announced.append(1)) == folder
    assert remote.calls == [] and announced == []


def test_checksum_mismatch_leaves_nothing(tmp_path):
    served = {f"https://example.invalid/{n}": d for n, d in FILES.items()}
    served["https://example.invalid/dev_data.json"] = b"[[]]"
    with pytest.raises(DownloadError, match=r"emorynlp: checksum verification failed: dev_data\.json: sha256"):
        download("emorynlp", tmp_path, fetch=FakeRemote(served), manifest=files_manifest())
    assert leftovers(tmp_path) == []


def test_fetch_failure_leaves_nothing(tmp_path):
    served = {"https://example.invalid/train_data.json": FILES["train_data.json"]}
    with pytest.raises(DownloadError, match=r"could not fetch https://example.invalid/dev_data.json: 404"):
        download("emorynlp", tmp_path, fetch=FakeRemote(served), manifest=files_manifest())
    assert leftovers(tmp_path) == []


def test_existing_copy_that_does_not_verify(tmp_path):
    remote = FakeRemote({f"https://example.invalid/{n}": d for n, d in FILES.items()})
    (tmp_path / "emorynlp").mkdir()
    (tmp_path / "emorynlp" / "train_data.json").write_bytes(b"[]")
    with pytest.raises(DownloadError, match="pass --force"):
        download("emorynlp", tmp_path, fetch=remote, manifest=files_manifest())
    assert remote.calls == []
    download("emorynlp", tmp_path, fetch=remote, manifest=files_manifest(), force=True)
    assert (tmp_path / "emorynlp" / "train_data.json").read_bytes() == FILES["train_data.json"]
    assert leftovers(tmp_path) == ["emorynlp"]


def test_force_keeps_old_copy_when_new_one_fails(tmp_path):
    (tmp_path / "emorynlp").mkdir()
    (tmp_path / "emorynlp" / "train_data.json").write_bytes(b"[]")
    with pytest.raises(DownloadError, match="could not fetch https://example.invalid/train_data.json: 404"):
        download("emorynlp", tmp_path, fetch=FakeRemote({}), manifest=files_manifest(), force=True)
    assert (tmp_path / "emorynlp" / "train_data.json").read_bytes() == b"[]"
    assert leftovers(tmp_path) == ["emorynlp"]


def _tarball(top: str, members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tree_manifest(expected: dict[str, bytes]) -> dict:
    lines = "".join(f"{rel} {sha(data)}\n" for rel, data in sorted(expected.items()))
    return {
        "folder": "swda", "repository": "example/repo", "commit": "abc1234", "verify": "tree",
        "sources": [{"url": "https://example.invalid/repo.tar.gz", "untar": {"swda_data/": "", "LICENSE": "LICENSE"}}],
        "include": ["LICENSE", "metadata/train_split.txt", "train/*.txt"],
        "file_count": len(expected), "tree_sha256": hashlib.sha256(lines.encode()).hexdigest(),
    }


def test_tree_download_from_tarball(tmp_path):
    expected = {"LICENSE": b"GPL", "metadata/train_split.txt": b"2001\n", "train/2001.txt": b"A|Hi.|sd\nB|Hello.|b\n"}
    archive = _tarball("repo-abc1234", {
        "LICENSE": b"GPL", "README.md": b"not wanted", "swda_data/metadata/train_split.txt": b"2001\n",
        "swda_data/train/2001.txt": expected["train/2001.txt"], "swda_data/full_set.txt": b"not wanted",
    })
    manifest = _tree_manifest(expected)
    folder = download("swda", tmp_path, fetch=FakeRemote({"https://example.invalid/repo.tar.gz": archive}), manifest=manifest)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(expected)
    assert tree_digest(folder, expected) == manifest["tree_sha256"]
    assert load_split("swda", "train", tmp_path).num_utterances == 2
    assert leftovers(tmp_path) == ["swda"]


def test_tree_digest_mismatch_leaves_nothing(tmp_path):
    expected = {"LICENSE": b"GPL", "train/2001.txt": b"A|Hi.|sd\n"}
    archive = _tarball("repo-abc1234", {"LICENSE": b"GPL", "swda_data/train/2001.txt": b"A|Changed.|sd\n"})
    with pytest.raises(DownloadError, match="swda: checksum verification failed: tree digest"):
        download("swda", tmp_path, fetch=FakeRemote({"https://example.invalid/repo.tar.gz": archive}), manifest=_tree_manifest(expected))
    assert leftovers(tmp_path) == []
    archive = _tarball("repo-abc1234", {"LICENSE": b"GPL"})
    with pytest.raises(DownloadError, match="1 files, expected 2"):
        download("swda", tmp_path, fetch=FakeRemote({"https://example.invalid/repo.tar.gz": archive}), manifest=_tree_manifest(expected))
    with pytest.raises(DownloadError, match="not a valid tar archive"):
        download("swda", tmp_path, fetch=FakeRemote({"https://example.invalid/repo.tar.gz": b"garbage"}), manifest=_tree_manifest(expected))
    assert leftovers(tmp_path) == []


def test_zip_members_by_base_name(tmp_path):
    buf = io.BytesIO()
    files = {"dialogues_train.txt": b"Hi . __eou__ Yo . __eou__\n", "dialogues_emotion_train.txt": b"0 4\n", "dialogues_act_train.txt": b"2 1\n"}
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(f"train/{name}", data)
        zf.writestr("__MACOSX/train/._dialogues_train.txt", b"junk")
    manifest = {
        "folder": "dailydialog", "repository": "example/repo", "commit": "0" * 40, "verify": "files",
        "sources": [{"url": "https://example.invalid/train.zip", "unzip": {f"train/{n}": n for n in files}}],
        "files": {f"train/{n}": {"sha256": sha(d), "size": len(d)} for n, d in files.items()},
    }
    download("dailydialog", tmp_path, fetch=FakeRemote({"https://example.invalid/train.zip": buf.getvalue()}), manifest=manifest)
    assert load_split("dailydialog", "train", tmp_path)[0][1].labels == {"emotion": "happiness", "act": "inform"}


def test_cli_download_failure_is_one_line(tmp_path, monkeypatch):
    import turnformer.data.download as dl

    def no_network(url, dest):
        raise OSError("network is unreachable")

    monkeypatch.setattr(dl, "urllib_fetch", no_network)
    result = CliRunner().invoke(data_app, ["download", "meld", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "error: could not fetch https://raw.githubusercontent.com/declare-lab/MELD/" in result.output
    assert "Traceback" not in result.output
    assert leftovers(tmp_path) == []


# -------------------------------------------------------------------------------- real manifests
@pytest.mark.parametrize("folder", sorted({info.folder for info in DATASETS.values() if not info.manual_download}))
def test_real_manifests_are_well_formed(folder):
    m = load_manifest(folder)
    assert m["folder"] == folder
    assert re.fullmatch(r"[0-9a-f]{7,40}", m["commit"])
    assert all(m["commit"] in s["url"] and s["url"].startswith("https://") for s in m["sources"])
    if m["verify"] == "files":
        assert m["files"] and all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in m["files"].values())
        placed = {s["path"] for s in m["sources"] if "path" in s} | {k for s in m["sources"] for k in s.get("unzip", {})}
        assert placed == set(m["files"])
    else:
        assert m["verify"] == "tree" and m["file_count"] > 1000 and re.fullmatch(r"[0-9a-f]{64}", m["tree_sha256"])
    assert (MANIFEST_DIR / f"{folder}.json").is_file()


@pytest.mark.data
@pytest.mark.parametrize("folder", ["meld", "emorynlp", "dailydialog"])
def test_real_manifest_download_from_local_copy(folder, data_dir, tmp_path):
    """The real manifests, served from the shared copy instead of GitHub: fetch, unpack, verify, load."""
    manifest = load_manifest(folder)
    served = {}
    for source in manifest["sources"]:
        if "path" in source:
            served[source["url"]] = (data_dir / folder / source["path"]).read_bytes()
        else:  # a zip of the split's files, as in the official release
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                for dest in source["unzip"]:
                    zf.writestr(dest, (data_dir / folder / dest).read_bytes())
            served[source["url"]] = buf.getvalue()
    out = tmp_path / "data"
    download(folder, out, fetch=FakeRemote(served))
    verify_folder(out / folder, manifest)
    assert compute_checksums(out / folder, manifest)["files"] == manifest["files"]
    assert len(load_split(folder, "test", out)) == len(load_split(folder, "test", data_dir))


def test_manifests_are_valid_json_files():
    paths = sorted(MANIFEST_DIR.glob("*.json"))
    assert paths, f"no manifests in {MANIFEST_DIR}"
    for path in paths:
        assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict), path


def test_a_failed_download_leaves_no_folder_it_made(tmp_path):
    with pytest.raises(DownloadError, match="could not fetch"):
        download("emorynlp", tmp_path / "new" / "data", fetch=FakeRemote({}), manifest=files_manifest())
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    with pytest.raises(DownloadError, match="could not fetch"):
        download("emorynlp", tmp_path / "mine", fetch=FakeRemote({}), manifest=files_manifest())
    assert (tmp_path / "mine").is_dir()  # the user's own folder stays


def test_verify_names_a_file_in_place_of_the_dataset_folder(tmp_path):
    """A file where the dataset's folder should be was "does not exist"."""
    (tmp_path / "meld").write_text("")
    result = CliRunner().invoke(data_app, ["verify", "meld", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and f"{tmp_path / 'meld'} is a file, not a folder" in " ".join(result.output.split()), result.output
