"""PrunerConfig helpers: operating point names and config.json rewrites that never leave half a file."""

from __future__ import annotations

import json

import pytest
from pruner_model.core.configuration import (
    POINT_NAME_MAX_CHARS,
    check_operating_points,
    is_point_name,
    save_config,
)

from pruner_model import PrunerConfig


def test_a_point_name_is_a_non_blank_string_up_to_the_limit():
    assert is_point_name("nq") and is_point_name("x" * POINT_NAME_MAX_CHARS)
    for bad in ("", "   ", "x" * (POINT_NAME_MAX_CHARS + 1), 3, None):
        assert not is_point_name(bad)
    with pytest.raises(ValueError, match=f"1-{POINT_NAME_MAX_CHARS} characters"):
        check_operating_points({"x" * (POINT_NAME_MAX_CHARS + 1): {"threshold": 0.1, "relative_floor": None}})


def test_save_config_writes_what_save_pretrained_writes_and_keeps_the_old_file_on_failure(
    tmp_path, monkeypatch
):
    cfg = PrunerConfig(threshold=0.25, operating_points={"nq": {"threshold": 0.5, "relative_floor": 0.01}})
    (tmp_path / "a").mkdir()
    cfg.save_pretrained(str(tmp_path / "a"))
    save_config(cfg, tmp_path / "b")
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == json.loads(
        (tmp_path / "a" / "config.json").read_text()
    )
    before = (tmp_path / "b" / "config.json").read_bytes()

    def fail_halfway(self, path, use_diff=True):
        with open(path, "w") as fh:
            fh.write('{"threshold": ')
        raise OSError("disk full")

    monkeypatch.setattr(PrunerConfig, "to_json_file", fail_halfway)
    cfg.threshold = 0.75
    with pytest.raises(OSError, match="disk full"):
        save_config(cfg, tmp_path / "b")
    assert (tmp_path / "b" / "config.json").read_bytes() == before
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["config.json"]
    assert PrunerConfig.from_pretrained(str(tmp_path / "b")).threshold == 0.25
