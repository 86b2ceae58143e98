"""Where the bigbench sdist comes from: a copy named with --sdist or $PRUNER_BIGBENCH_SDIST, the
cache, or pip; a file that is not the sdist, a damaged one and a failed download are one-line
errors that write nothing."""

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from pruner_model.annotation import bigbench
from pruner_model.annotation.sources import TASK_FILES, fetch_task

from pruner_model.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bigbench"


def _squad(prefix: str) -> bytes:
    """A SQuAD-format file of three articles, one question a paragraph."""
    data = []
    for a, topic in enumerate(("river", "mountain", "castle")):
        paragraphs = []
        for p in range(2):
            context = (
                f"The {topic} {prefix}{a}{p} is old. It was named by Ann Lee in 190{p}. Tourists visit it."
            )
            answer = "Ann Lee"
            qas = [
                {
                    "id": f"{prefix}{a}{p}",
                    "question": f"Who named the {topic} {prefix}{a}{p}?",
                    "answers": [{"text": answer, "answer_start": context.index(answer)}],
                }
            ]
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"{topic} {prefix}", "paragraphs": paragraphs})
    return json.dumps({"data": data}).encode()


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def sdist(tmp_path) -> Path:
    """A small stand-in for bigbench-1.0.0.tar.gz with its layout: the three SQuAD files that may be
    read, the two held-out ones (which must never be extracted) and one mix task file."""
    root = bigbench.TASKS + "squad_shifts/"
    members = {
        root + "squaddev_v1.1.json": _squad("s"),
        root + "new_wiki_v1.0.json": _squad("w"),
        root + "nyt_v1.0.json": _squad("n"),
        root + "reddit_v1.0.json": b"held out",
        root + "amazon_v1.0.json": b"held out",
        bigbench.TASKS + TASK_FILES["nq"]: (FIXTURES / "nq.json").read_bytes(),
    }
    return _tar(tmp_path / "copy-of-bigbench.tar.gz", members)


def _files(folder: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if folder.exists()
        else []
    )


def _one_error_line(err: str) -> str:
    """The one error line (a progress line such as "downloading ..." may come before it)."""
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]) and "Traceback" not in err, err
    return errors[0]


def test_data_squad_reads_a_copy_named_with_sdist(sdist, tmp_path, monkeypatch):
    monkeypatch.delenv(bigbench.ENV, raising=False)
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = ["data", "squad", "--sdist", str(sdist), "--cache-dir", str(cache), "--output", str(out)]
    assert main(args + ["--passages-per-group", "3"]) == 0
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    dev = [json.loads(x) for x in (out / "dev.jsonl").read_text().splitlines()]
    assert {r["id"].split("/")[0][0] for r in train} == {"s", "w"} and {r["id"][0] for r in dev} == {"n"}
    # only the splits that may be read were extracted; nothing was downloaded into the cache
    assert _files(cache) == [
        "squad_shifts/new_wiki_v1.0.json",
        "squad_shifts/nyt_v1.0.json",
        "squad_shifts/squaddev_v1.1.json",
    ]


def test_the_environment_names_the_copy_for_the_mix_sources(sdist, tmp_path, monkeypatch):
    monkeypatch.setenv(bigbench.ENV, str(sdist))
    path = fetch_task("nq", tmp_path / "cache")
    assert path.read_bytes() == (FIXTURES / "nq.json").read_bytes()


def test_a_file_that_is_not_the_sdist_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(bigbench.ENV, raising=False)
    cache, out = tmp_path / "cache", tmp_path / "out"
    other = _tar(tmp_path / "other.tar.gz", {"bigbench-0.0.1/README.md": b"an older release"})
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b not really gzip")
    for path, says in (
        (other, "it has no bigbench-1.0.0/bigbench/benchmark_tasks/squad_shifts/"),
        (junk, "not a"),
    ):
        argv = ["data", "squad", "--sdist", str(path), "--cache-dir", str(cache), "--output", str(out)]
        assert main(argv) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert str(path) in line and says in line
    assert main(["data", "mix", "--sdist", str(tmp_path / "missing.tar.gz"), "--output", str(out)]) == 2
    assert "--sdist" in _one_error_line(capsys.readouterr().err)
    assert _files(cache) == [] and _files(out) == []


def test_a_damaged_cached_sdist_says_to_delete_it(sdist, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(bigbench.ENV, raising=False)
    cache = tmp_path / "cache"
    cached = bigbench.cached_sdist(cache)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(sdist.read_bytes()[: sdist.stat().st_size // 2])  # an interrupted copy
    assert main(["data", "squad", "--cache-dir", str(cache), "--output", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(cached) in line and "delete it" in line
    assert _files(cache) == ["downloads/bigbench-1.0.0.tar.gz"]


def test_a_failed_download_says_how_to_give_a_copy_and_leaves_no_part(tmp_path, capsys, monkeypatch):
    """pip pointed at an empty index (no network): its error, the ways to give a copy, and an empty
    downloads folder."""
    monkeypatch.delenv(bigbench.ENV, raising=False)
    index = tmp_path / "empty-index"
    index.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index.as_uri())
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    cache = tmp_path / "cache"
    assert main(["data", "squad", "--cache-dir", str(cache), "--output", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "could not download bigbench==1.0.0" in line and "No matching distribution" in line
    assert "without the corpus, `pruner adapt --labeled FILE --output DIR`" in line
    assert (
        "--sdist PATH" in line
        and "checkout" in line
        and bigbench.ENV in line
        and str(bigbench.cached_sdist(cache)) in line
    )
    assert _files(cache) == [] and not (tmp_path / "out").exists()


def test_a_checkout_of_the_repository_or_an_unpacked_sdist_is_read_as_it_is(sdist, tmp_path, monkeypatch):
    monkeypatch.delenv(bigbench.ENV, raising=False)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")  # bigbench-1.0.0/bigbench/... inside
        tar.extractall(tmp_path / "repo", filter="data")
    checkout = tmp_path / "repo" / "bigbench-1.0.0"  # a checkout: bigbench/benchmark_tasks/ at its top
    for n, folder in enumerate((checkout, tmp_path / "unpacked")):
        cache, out = tmp_path / f"cache{n}", tmp_path / f"out{n}"
        argv = ["data", "squad", "--sdist", str(folder), "--cache-dir", str(cache), "--output", str(out)]
        assert main([*argv, "--passages-per-group", "3"]) == 0
        assert (out / "dev.jsonl").read_text().count('"query"') > 0
        assert "squad_shifts/reddit_v1.0.json" not in _files(cache)  # held out: never copied
        assert fetch_task("nq", cache, folder).read_bytes() == (FIXTURES / "nq.json").read_bytes()


def test_a_folder_that_is_no_checkout_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(bigbench.ENV, raising=False)
    cache, out = tmp_path / "cache", tmp_path / "out"
    empty = tmp_path / "somewhere"
    (empty / "bigbench" / "benchmark_tasks").mkdir(parents=True)
    argv = ["data", "squad", "--sdist", str(tmp_path), "--cache-dir", str(cache), "--output", str(out)]
    assert main(argv) == 2
    assert "is not a BIG-bench checkout" in _one_error_line(capsys.readouterr().err)
    argv[3] = str(empty)
    assert main(argv) == 2
    assert "without bigbench/benchmark_tasks/squad_shifts/" in _one_error_line(capsys.readouterr().err)
    assert _files(cache) == [] and _files(out) == []
