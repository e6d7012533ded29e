"""Memory settings of the ONNX Runtime sessions and of malloc: weights split out of the graph and
shared by a voice's sessions, arena shrinkage on runs over the memory budget, glibc settings."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from voxflow.malloc import ARENA_MAX, MMAP_THRESHOLD, trim_heap, tune_malloc
from voxflow.memory_budget import ArenaBudget, BudgetCollector
from voxflow.memory_gate import WorkingSetGate
from voxflow.models.onnx_memory import SHRINK_ENTRY, ArenaSession, SharedWeights
from voxflow.models.piper import loader
from voxflow.models.piper.loader import load_graph, read_voice_config, rewrite_graph
from voxflow.models.piper.synth import synthesize_batch

IDS = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 2], np.int64)


def test_both_sessions_of_one_voice_share_one_prepared_graph(tiny_voice_dir):
    path = tiny_voice_dir / "tiny.onnx"
    graph, solo = load_graph(path, 1, 1), load_graph(path, 2, 1, spin=False)
    assert graph.source is solo.source and graph.source is not None
    pairs = ((graph.session, solo.session), (graph.frames.flow, solo.frames.flow),
             (graph.frames.decoder, solo.frames.decoder))
    for part, (session, solo_session) in zip(graph.source.parts(), pairs, strict=True):
        weights = part.weights
        assert session.weights is weights and solo_session.weights is weights
        assert weights.arrays or part is graph.source.flow  # the tiny flow has no weights
        names = {i.name for i in session.get_inputs()}
        assert set(weights.arrays) <= names  # the weights are graph inputs now
    assert {"input", "input_lengths", "scales", "noise_dp", "noise_z"} <= {
        i.name for i in graph.session.get_inputs()}
    assert [i.name for i in graph.frames.decoder.get_inputs()][0] == "/Mul_7_output_0"
    assert graph.frames.flow_inputs[:2] == ("z", "y_mask_cf")  # the tiny voice's z_p and mask


def test_split_weights_give_the_same_audio_as_the_plain_graph(tiny_voice_dir):
    path = tiny_voice_dir / "tiny.onnx"
    config, _ = read_voice_config(path.with_name("tiny.onnx.json"))
    model, channels, durations = rewrite_graph(onnx.load(str(path)))
    plain = loader.RewrittenGraph(
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]),
        channels, durations)
    split = load_graph(path, 1, 1)
    a = synthesize_batch(plain, config, [IDS], [(7, 0)], 1.0, 12.0)[0]
    b = synthesize_batch(split, config, [IDS], [(7, 0)], 1.0, 12.0)[0]
    assert a.size > 0 and np.array_equal(a, b)


def test_prepared_graph_is_dropped_with_its_last_session(tiny_voice_dir, monkeypatch):
    path = tiny_voice_dir / "tiny.onnx"
    monkeypatch.setattr(loader, "_prepared", {})  # a graph an earlier test still holds is not ours
    first = load_graph(path, 1, 1).source
    held = weakref.ref(first)
    del first
    gc.collect()
    assert held() is None  # freed: the loader's cache kept no strong reference
    assert all(ref() is None for ref in loader._prepared.values())


def test_small_initializers_stay_in_the_graph(tiny_voice_dir):
    model = onnx.load(str(tiny_voice_dir / "tiny.onnx"))
    sizes = {i.name: len(i.raw_data) for i in model.graph.initializer}
    weights = SharedWeights(model, min_bytes=64)
    assert set(weights.arrays) == {n for n, size in sizes.items() if size >= 64}
    assert {i.name for i in model.graph.initializer} == {n for n, s in sizes.items() if s < 64}
    assert weights.nbytes == sum(sizes[n] for n in weights.arrays)


def test_weights_equal_to_another_graphs_are_its_arrays_and_changed_ones_are_copied(
        tiny_voice_dir):
    first = SharedWeights(onnx.load(str(tiny_voice_dir / "tiny.onnx")), min_bytes=64)
    model = onnx.load(str(tiny_voice_dir / "tiny.onnx"))
    changed = next(i for i in model.graph.initializer if len(i.raw_data) >= 64)
    array = onnx.numpy_helper.to_array(changed).copy()
    array.flat[0] += 1  # same name, other values (as a re-laid-out decoder weight)
    changed.CopyFrom(onnx.numpy_helper.from_array(array, changed.name))
    second = SharedWeights(model, min_bytes=64, share=[first])
    assert set(second.arrays) == set(first.arrays)
    for name, a in second.arrays.items():
        if name == changed.name:
            assert a is not first.arrays[name] and np.array_equal(a, array)
            assert second.values[name] is not first.values[name]
        else:
            assert a is first.arrays[name]  # one copy for both graphs' sessions
            assert second.values[name] is first.values[name]


class FakeSession:
    def __init__(self):
        self.calls = []

    def run(self, output_names, feed, run_options):
        self.calls.append((output_names, feed, run_options))
        return ["ok"]

    def get_inputs(self):
        return ["x"]


class FakeWeights:
    values = {"w": "weight", "x": "weight x"}

    def feed(self, inputs):
        return SharedWeights.feed(self, inputs)


class FakeRss:
    """RSS the test sets by hand, in MiB."""

    def __init__(self, mib: int):
        self.mib = mib

    def __call__(self) -> int:
        return self.mib << 20


def _loaded(budget: ArenaBudget, rss: FakeRss, base: int, models: dict[str, int]) -> None:
    """Account models as an engine does: `base` MiB before, each load adding its MiB."""
    rss.mib = base
    budget.start(budget.headroom)
    for name, mib in models.items():
        with budget.loading(name):
            rss.mib += mib


def test_budget_is_the_models_memory_plus_the_headroom_and_python_lives_in_the_headroom():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=400 << 20, rss=rss)
    assert budget.limit is None and not budget.over()  # no engine's accounting yet
    _loaded(budget, rss, base=120, models={"piper": 110, "kokoro": 180})
    assert budget.models == {"piper": 110 << 20, "kokoro": 180 << 20}
    assert budget.limit == (290 + 400) << 20
    assert budget.run_capacity == (400 - 120 - 32) << 20  # less Python's RSS and the margin
    rss.mib = 690
    assert not budget.over()
    rss.mib = 691
    assert budget.over() and budget.shrinks == 1


def test_the_audio_cache_bound_is_counted_in_the_budget_and_leaves_the_runs_theirs():
    rss = FakeRss(120)
    budget = ArenaBudget(headroom_bytes=400 << 20, rss=rss)
    budget.start(400 << 20, cache_bytes=64 << 20)  # cache.max_bytes, as Engine.start gives it
    with budget.loading("piper"):
        rss.mib += 110
    assert budget.limit == (110 + 64 + 400) << 20
    assert budget.run_capacity == (400 - 120 - 32) << 20  # the cache's bytes are its own
    rss.mib = 110 + 64 + 400
    assert not budget.over()
    rss.mib += 1
    assert budget.over()


def test_a_new_engine_forgets_the_last_ones_models_and_null_headroom_means_no_budget():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=400 << 20, rss=rss)
    _loaded(budget, rss, base=100, models={"a": 50})
    _loaded(budget, rss, base=300, models={"b": 20})
    assert budget.models == {"b": 20 << 20} and budget.limit == 420 << 20
    assert budget.run_capacity == (100 - 32) << 20
    budget.start(None)
    with budget.loading("c"):
        rss.mib += 10
    rss.mib = 10**6
    assert budget.limit is None and budget.run_capacity is None and not budget.over()


def test_a_base_over_the_headroom_leaves_runs_no_capacity():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=100 << 20, rss=rss)
    _loaded(budget, rss, base=150, models={"a": 10})
    assert budget.run_capacity == 0


def test_budget_metrics_give_the_limit_the_models_the_shrinks_and_the_gate():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=400 << 20, rss=rss)
    gate = WorkingSetGate()
    collector = BudgetCollector(budget, gate)
    names = [m.name for m in collector.collect()]
    assert names == ["voxflow_model_memory_bytes", "voxflow_arena_shrinks",
                     "voxflow_memory_reserved_bytes", "voxflow_buffered_audio_bytes",
                     "voxflow_memory_waits", "voxflow_memory_wait_seconds"]
    _loaded(budget, rss, base=100, models={"piper": 200})
    gate.set_capacity(budget.run_capacity)
    rss.mib = 800
    budget.over()
    gate.add_buffered(3 << 20)
    with gate.hold(5 << 20):
        values = {m.name: [(x.labels, x.value) for x in m.samples] for m in collector.collect()}
    assert values == {
        "voxflow_memory_budget_bytes": [({}, 600 << 20)],
        "voxflow_model_memory_bytes": [({"model": "piper"}, 200 << 20)],
        "voxflow_arena_shrinks": [({}, 1)],
        "voxflow_memory_run_capacity_bytes": [({}, (300 - 32) << 20)],
        "voxflow_memory_reserved_bytes": [({}, 5 << 20)],
        "voxflow_buffered_audio_bytes": [({}, 3 << 20)],
        "voxflow_memory_waits": [({}, 0)],
        "voxflow_memory_wait_seconds": [({}, 0.0)],
    }


def test_runs_under_budget_keep_the_arena_and_runs_over_it_shrink_it():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=10 << 20, rss=rss)
    _loaded(budget, rss, base=0, models={"m": 100})
    fake = FakeSession()
    session = ArenaSession(fake, FakeWeights(), budget)
    assert session.run(["y"], {"x": "input x"}) == ["ok"]
    names, feed, options = fake.calls[0]
    assert names == ["y"] and feed == {"w": "weight", "x": "input x"}
    assert options is None  # under budget: ONNX Runtime's defaults, the arena is kept
    rss.mib = 111
    session.run(["y"], {"x": "input x"})
    options = fake.calls[1][2]
    assert options.get_run_config_entry(SHRINK_ENTRY[0]) == SHRINK_ENTRY[1] == "cpu:0"
    assert session.get_inputs() == ["x"] and budget.shrinks == 1


def test_given_run_options_keep_their_entries_and_gain_the_shrink_entry_over_budget():
    rss = FakeRss(0)
    budget = ArenaBudget(headroom_bytes=0, rss=rss)
    _loaded(budget, rss, base=0, models={"m": 100})
    rss.mib = 101
    fake = FakeSession()
    options = ort.RunOptions()
    options.add_run_config_entry("memory.arena_tag", "x")  # any entry of the caller's
    ArenaSession(fake, budget=budget).run(None, {"x": 1}, options)
    _, feed, used = fake.calls[0]
    assert used is options and feed == {"x": 1}
    assert used.get_run_config_entry("memory.arena_tag") == "x"
    assert used.get_run_config_entry(SHRINK_ENTRY[0]) == "cpu:0"


def test_a_real_session_over_budget_runs_and_gives_the_same_audio(tiny_voice_dir):
    path = tiny_voice_dir / "tiny.onnx"
    config, _ = read_voice_config(path.with_name("tiny.onnx.json"))
    graph = load_graph(path, 1, 1)
    kept = synthesize_batch(graph, config, [IDS], [(7, 0)], 1.0, 12.0)[0]
    rss = FakeRss(0)
    graph.session.budget = ArenaBudget(headroom_bytes=0, rss=rss)
    _loaded(graph.session.budget, rss, base=0, models={"tiny": 1})
    rss.mib = 2
    shrunk = synthesize_batch(graph, config, [IDS], [(7, 0)], 1.0, 12.0)[0]
    assert graph.session.budget.shrinks == 1 and np.array_equal(kept, shrunk)


def test_malloc_settings_are_set_once_on_glibc():
    assert ARENA_MAX == 2 and MMAP_THRESHOLD == 1 << 20
    assert tune_malloc() is True  # Linux with glibc, as this project's machines
    assert tune_malloc() is True
    assert trim_heap() in (True, False)


def test_spinning_sessions_stop_spinning_when_a_run_returns_and_others_never_spin():
    from voxflow.models.onnx_memory import shared_session_options

    spinning = shared_session_options(2, 1, spin=True)
    assert spinning.get_session_config_entry("session.force_spinning_stop") == "1"
    quiet = shared_session_options(2, 1, spin=False)
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(RuntimeError, match="does not have configuration"):
        quiet.get_session_config_entry("session.force_spinning_stop")
