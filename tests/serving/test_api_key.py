"""A key that is asked for never fails open: `pruner serve` stops with one line, before loading
the model, when the variable it names is unset or empty."""

from __future__ import annotations

import pytest

from pruner_model.cli import main


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--api-key-env", "PROD_KEY"], {}, "PROD_KEY is not set"),
        (["--api-key-env", "PROD_KEY"], {"PROD_KEY": ""}, "PROD_KEY is empty"),
        (["--api-key-env", "PROD_KEY"], {"PROD_KEY": "  "}, "PROD_KEY is empty"),
        ([], {"PRUNER_API_KEY": ""}, "PRUNER_API_KEY is empty"),
    ],
)
def test_a_named_key_that_is_missing_stops_the_server(tmp_path, monkeypatch, capsys, argv, env, message):
    monkeypatch.delenv("PROD_KEY", raising=False)
    monkeypatch.delenv("PRUNER_API_KEY", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    # the model folder does not exist: the key is checked first, so the key's error is the one shown
    assert main(["serve", "--model", str(tmp_path / "none"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


def test_no_key_asked_for_is_an_open_server_and_a_set_key_is_taken(monkeypatch):
    from pruner_model.commands.serve import _api_key, _is_loopback

    assert _api_key(None, {}) is None
    assert _api_key(None, {"PRUNER_API_KEY": "k"}) == "k"
    assert _api_key("PROD_KEY", {"PROD_KEY": "s3cret"}) == "s3cret"
    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0") and not _is_loopback("example.org")
