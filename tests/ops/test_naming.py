"""lite.ops.naming."""

from __future__ import annotations

from lite.ops.naming import unique_name


def test_unique_name_counts_up_from_the_hint_and_records_it():
    taken = {"conv", "conv_1", "relu"}
    assert unique_name("conv", taken) == "conv_2" and "conv_2" in taken
    assert unique_name("conv", taken) == "conv_3"
    assert unique_name("add", taken) == "add" and unique_name("add", taken) == "add_1"
    assert unique_name("conv_1", taken) == "conv_1_1"
