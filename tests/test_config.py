"""LabConfig: defaults, validation, and unknown keys that raise with a hint."""

import pytest

from labutils.config import LabConfig


def test_unknown_override_raises_and_suggests_the_right_key():
    with pytest.raises(ValueError, match=r"max_nrom \(did you mean max_norm\?\)"):
        LabConfig().replace(max_nrom=1.0)


@pytest.mark.parametrize("bad, message", [
    ({"schedule": "cosine"}, "schedule='cosine' is unknown"),
    ({"amp": "fp8"}, "amp='fp8' is unknown"),
    ({"accum_steps": 0}, "accum_steps must be at least 1"),
    ({"max_norm": -1.0}, "max_norm must be positive"),
])
def test_invalid_values_raise_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        LabConfig(**bad)


def test_describe_prints_every_key():
    text = LabConfig(max_norm=1.0).describe()
    assert all(key in text for key in LabConfig.keys())
    assert "max_norm           = 1.0" in text
