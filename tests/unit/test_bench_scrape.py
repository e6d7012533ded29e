import pytest

from voxflow.bench.scrape import sample_value

TEXT = """# HELP voxflow_cancellations_total Requests cancelled.
# TYPE voxflow_cancellations_total counter
voxflow_cancellations_total{model="piper",reason="client"} 3.0
voxflow_cancellations_total{model="piper",reason="stalled"} 1.0
# HELP voxflow_audio_cache_disk_entries Entries on disk.
# TYPE voxflow_audio_cache_disk_entries gauge
voxflow_audio_cache_disk_entries 2.0
"""


def test_a_sample_is_found_by_its_name_and_a_subset_of_its_labels():
    assert sample_value(TEXT, "voxflow_cancellations_total", reason="stalled") == 1.0
    assert sample_value(TEXT, "voxflow_cancellations_total", model="piper") == 3.0
    assert sample_value(TEXT, "voxflow_audio_cache_disk_entries") == 2.0


def test_an_absent_sample_is_zero_and_a_body_that_is_no_exposition_raises():
    assert sample_value(TEXT, "voxflow_cancellations_total", reason="timeout") == 0.0
    assert sample_value(TEXT, "voxflow_cancellations") == 0.0  # the family, not a sample
    with pytest.raises(ValueError):
        sample_value("not { an exposition", "x")
