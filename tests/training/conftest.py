"""Fixtures of the training tests."""

import pytest

from tests.training.helpers import write_data_files


@pytest.fixture
def data_files(tmp_path):
    return write_data_files(tmp_path)
