"""Precision chosen from the machine: ``auto`` is bf16 only where bf16 is native (CPU flags and
GPUs mocked), forcing bf16 where it is emulated warns once (training) or is refused (inference),
and the choice is recorded in the checkpoint."""

import json
import logging
from pathlib import Path

import pytest
import torch
from pruner_model.core import precision
from pruner_model.core.precision import (
    cpu_class,
    cpu_has_bf16,
    cpu_prefers_int8,
    int8_reason,
    resolve_precision,
)

ROOT = Path(__file__).resolve().parents[2]
AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})  # AMD Zen 2/3, most laptops
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512_vnni"}  # Skylake/Cascade Lake: no bf16
AVX512_BF16 = AVX512 | {"avx512_bf16"}  # AMD Zen 4, Cooper Lake
AMX = AVX512_BF16 | {"amx_tile", "amx_bf16", "amx_int8"}  # Sapphire Rapids and later
ARM = frozenset({"fp", "asimd"})


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    precision._warned.clear()


def mock_cpu(monkeypatch, flags):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize(
    "flags, expected, klass",
    [
        (AVX2, "fp32", "AVX2"),
        (AVX512, "fp32", "AVX-512"),
        (AVX512_BF16, "bf16", "AVX-512 BF16"),
        (AMX, "bf16", "AMX"),
        (ARM, "fp32", "ARM"),
        (frozenset(), "fp32", "other"),
    ],
)
def test_auto_on_cpus(flags, expected, klass):
    assert resolve_precision("auto", "cpu", flags=flags) == expected
    assert cpu_has_bf16(flags) == (expected == "bf16")
    assert cpu_class(flags) == klass
    for purpose in ("training", "inference"):
        assert resolve_precision("auto", "cpu", purpose=purpose, flags=flags) == expected


@pytest.mark.parametrize("bf16_supported, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_on_gpus(monkeypatch, bf16_supported, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_supported)
    # the GPU decides, whatever the host CPU has
    assert resolve_precision("auto", "cuda", flags=AVX2) == expected
    assert resolve_precision("auto", None, flags=AVX2) == expected
    assert resolve_precision("fp16", "cuda:0", flags=AVX2) == "fp16"


def test_spellings_of_fp32_and_bf16():
    for fp32 in (None, False, "no", "fp32"):
        assert resolve_precision(fp32, "cpu", flags=AVX2) == "fp32"
    assert resolve_precision(True, "cpu", flags=AMX) == "bf16"
    with pytest.raises(ValueError, match="one of auto"):
        resolve_precision("half", "cpu", flags=AMX)
    with pytest.raises(ValueError, match="for GPUs"):
        resolve_precision("fp16", "cpu", flags=AMX)


def test_forced_bf16_without_native_warns_once_for_training_and_is_refused_for_inference(caplog):
    with caplog.at_level(logging.WARNING, logger="pruner_model.core.precision"):
        for _ in range(3):
            assert resolve_precision("bf16", "cpu", purpose="training", flags=AVX2) == "bf16"
    warnings = [r.getMessage() for r in caplog.records if r.name == "pruner_model.core.precision"]
    assert len(warnings) == 1 and "AVX2" in warnings[0] and "40x slower" in warnings[0]
    assert "\n" not in warnings[0]
    with pytest.raises(ValueError, match="needs a CPU with AVX-512 BF16 or AMX; this one is AVX2"):
        resolve_precision("bf16", "cpu", purpose="inference", flags=AVX2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pruner_model.core.precision"):
        assert resolve_precision("bf16", "cpu", purpose="training", flags=AMX) == "bf16"
    assert not caplog.records  # native: nothing to warn about


@pytest.mark.parametrize(
    "flags, expected",
    [
        (AVX2, True),  # no native bf16: int8 is the fast path
        (AVX512, True),
        (AVX512_BF16, True),  # VNNI int8 dot products outrun bf16's
        (AVX512_BF16 - {"avx512_vnni"}, False),  # bf16 without VNNI: bf16
        (AMX, False),  # AMX bf16 tiles stay the default
        (ARM, True),
    ],
)
def test_where_a_no_flag_load_prefers_int8(flags, expected):
    assert cpu_prefers_int8(flags) == expected
    if expected:
        reason = int8_reason(flags)
        assert reason == (
            "this CPU has no native bf16"
            if not cpu_has_bf16(flags)
            else "on this AVX-512 BF16 CPU int8 (VNNI) outruns bf16"
        )


def test_onednn_isa_cap_turns_native_bf16_off(monkeypatch):
    """ONEDNN_MAX_CPU_ISA caps what torch's matmul kernels use: bf16 is emulated under an AVX2 cap."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not cpu_has_bf16(AMX) and cpu_class(AMX) == "AVX2"
    assert resolve_precision("auto", "cpu", flags=AMX) == "fp32"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert cpu_has_bf16(AMX) and resolve_precision("auto", "cpu", flags=AMX) == "bf16"


def test_shipped_configs_choose_precision_from_the_machine():
    from pruner_model.training.config import load_config

    for name in ("default", "reference", "gpu", "demo"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        assert cfg.train.mixed_precision == "auto", name
        assert cfg.calibration.bf16 == "auto", name


def test_calibration_bf16_setting_spellings():
    from pruner_model.training.config import CalibrationSection, ConfigError, load_config

    assert load_config(None, ["calibration.bf16=true"]).calibration.bf16 == "yes"
    assert load_config(None, ["calibration.bf16=false"]).calibration.bf16 == "no"
    assert load_config(None).calibration.bf16 == "auto"
    assert CalibrationSection(bf16=True).bf16 == "yes"
    with pytest.raises(ConfigError, match="calibration.bf16"):
        load_config(None, ["calibration.bf16=sometimes"])


@pytest.mark.parametrize("flags, expected", [(AVX2, "fp32"), (AVX512_BF16, "bf16")])
def test_training_under_auto_records_the_choice(
    tmp_path, monkeypatch, tiny_model, bert_tokenizer, flags, expected
):
    from pruner_model.training.trainer import train

    from tests.training.helpers import tiny_cfg, write_data_files

    mock_cpu(monkeypatch, flags)
    cfg = tiny_cfg(
        write_data_files(tmp_path),
        **{
            "train.max_steps": 1,
            "train.eval_every": 0,
            "train.mixed_precision": "auto",
            "calibration.bf16": "auto",
        },
    )
    seen = []
    real = type(tiny_model).predict

    def predict(self, batch, dtype=None):
        seen.append(dtype)
        return real(self, batch, dtype)

    monkeypatch.setattr(type(tiny_model), "predict", predict)
    train(cfg, tmp_path / "run", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["precision"]["training"] == expected
    assert saved["precision"]["calibration"] == expected
    assert saved["precision"]["machine"]["cpu_class"] == cpu_class(flags)
    assert saved["precision"]["machine"]["native_bf16"] == (expected == "bf16")
    assert saved["calibration"]["scored_in"] == expected and saved["dev"]["scored_in"] == expected
    assert 0 <= saved["dev"]["precision"] <= 1  # the sentence precision metric, not overwritten
    assert set(seen) == {None if expected == "fp32" else "bf16"}  # every scoring pass, same precision
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"trained in {expected}, calibrated and reported in {expected}" in card
    assert cpu_class(flags) in card


def test_torch_backend_auto_and_refusal(monkeypatch, tiny_model):
    from pruner_model.inference.backends import TorchBackend

    mock_cpu(monkeypatch, AVX2)
    b = TorchBackend(tiny_model, device="cpu", dtype="auto")
    assert b.precision == "fp32" and b.dtype is None
    with pytest.raises(ValueError, match="this one is AVX2"):
        TorchBackend(tiny_model, device="cpu", dtype="bf16")
    mock_cpu(monkeypatch, AMX)
    b = TorchBackend(tiny_model, device="cpu", dtype="auto")
    assert b.precision == "bf16" and b.dtype == "bf16"
    assert TorchBackend(tiny_model, device="cpu").precision == "fp32"  # the default stays fp32


def test_cli_prints_what_auto_resolved_to(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    from pruner_model.cli import main

    mock_cpu(monkeypatch, AVX2)
    passages = tmp_path / "p.json"
    passages.write_text(json.dumps(["Paris is the capital of France. It lies on the Seine."]))
    argv = ["prune", "--model", str(tiny_checkpoint), "--query", "capital?", "--passages", str(passages)]
    assert main([*argv, "--dtype", "auto"]) == 0
    err = capsys.readouterr().err
    assert "precision: --dtype auto -> torch fp32 on CPU AVX2 (no native bf16)" in err
    assert main([*argv, "--dtype", "bf16"]) == 2
    assert "error: precision 'bf16' needs a CPU with AVX-512 BF16 or AMX" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16])
def test_a_checkpoint_loads_in_the_fastest_precision_that_agrees_with_fp32(
    monkeypatch, tiny_checkpoint, flags
):
    """No dtype asked for: bf16 where it is native and its keep/drop decisions agree with fp32's
    on the validation sentences, else fp32; a dtype asked for is taken as it is."""
    from pruner_model.inference import ContextPruner, agreement

    mock_cpu(monkeypatch, flags)
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    if flags is AVX2:  # bf16 would be emulated: not even tried
        assert (pruner.precision, pruner.precision_agreement) == ("fp32", None)
        return
    assert pruner.precision_agreement is not None and 0.0 <= pruner.precision_agreement <= 1.0
    expected = "bf16" if pruner.precision_agreement >= agreement.MIN_AGREEMENT else "fp32"
    assert pruner.precision == expected
    assert pruner.prune("Where is it?", ["It is in Paris. It is old."]).stats.sentences_in == 2
    # bf16 that disagrees is not kept
    monkeypatch.setattr(agreement, "MIN_AGREEMENT", 1.01)
    assert ContextPruner.from_pretrained(tiny_checkpoint).precision == "fp32"
    # an explicit dtype is not second-guessed
    forced = ContextPruner.from_pretrained(tiny_checkpoint, dtype="bf16")
    assert (forced.precision, forced.precision_agreement) == ("bf16", None)
    assert ContextPruner.from_pretrained(tiny_checkpoint, dtype="fp32").precision == "fp32"
