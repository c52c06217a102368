"""A job's inputs: drawn on the CPU by seed, kept for the process's later jobs of the same shape."""

import torch

from fabench.measure import inputs
from fabench.measure.spec import Shape


def test_inputs_drawn_again_are_the_same_values_in_fresh_tensors(monkeypatch):
    """A later job of the shape gets the values a fresh draw gives, in tensors of its own: a backend
    that writes into its inputs leaves the next job's untouched. Blind side: the time saved is a
    GPU host's (the run's "inputs and fp32 reference" phase)."""
    monkeypatch.setattr(inputs, "_CPU_INPUTS", {})
    shape = Shape(batch=1, seq=16, heads=2, head_dim=8)
    first = inputs.make_inputs(shape, torch.float16, 7, "cpu")
    for tensor in first:
        tensor.fill_(0)  # as a backend writing in place would
    again = inputs.make_inputs(shape, torch.float16, 7, "cpu")
    gen = torch.Generator().manual_seed(7)
    fresh = [torch.randn((1, 16, 2, 8), generator=gen).to(torch.float16) for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(again, fresh))
    assert not torch.equal(inputs.make_inputs(shape, torch.float16, 8, "cpu")[0], again[0])  # another seed


def test_the_kept_inputs_stay_within_their_bound_the_least_recent_dropped(monkeypatch):
    monkeypatch.setattr(inputs, "_CPU_INPUTS", {})
    shape = Shape(batch=1, seq=64, heads=2, head_dim=32)  # 3 x 4096 fp32 values: 48 KiB a draw
    monkeypatch.setattr(inputs, "INPUT_CACHE_BYTES", 2 * 3 * 4096 * 4)
    for seed in (1, 2, 3):
        inputs.make_inputs(shape, torch.float32, seed, "cpu")
    assert [key[-1] for key in inputs._CPU_INPUTS] == [2, 3]
    inputs.make_inputs(shape, torch.float32, 2, "cpu")  # used again: now the most recent
    inputs.make_inputs(shape, torch.float32, 4, "cpu")
    assert [key[-1] for key in inputs._CPU_INPUTS] == [2, 4]


def test_inputs_drawn_ahead_are_the_ones_the_jobs_then_get_as_many_as_are_kept(monkeypatch):
    """A worker draws its jobs' inputs in its start-up (draw_ahead): each key once, in the jobs'
    order, only as many as the bound keeps (one more would drop the first a job asks for); a job
    then gets the kept draw's values, not a new draw. Blind side: the time it saves is a GPU host's."""
    monkeypatch.setattr(inputs, "_CPU_INPUTS", {})
    monkeypatch.setattr(inputs, "INPUT_CACHE_BYTES", 2 * 3 * 4096 * 4)  # two draws of the shape below
    shape = Shape(batch=1, seq=64, heads=2, head_dim=32)
    assert inputs.draw_ahead([(shape, torch.float32, 1), (shape, torch.float32, 1), (shape, torch.float32, 2),
                              (shape, torch.float32, 3)]) == 2
    assert [key[-1] for key in inputs._CPU_INPUTS] == [1, 2]
    kept = inputs._CPU_INPUTS[(1, 64, 2, 32, "torch.float32", 1)]
    assert inputs.cpu_inputs(shape, torch.float32, 1) is kept  # no new draw
    gen = torch.Generator().manual_seed(1)
    assert all(torch.equal(a, torch.randn((1, 64, 2, 32), generator=gen)) for a in inputs.make_inputs(shape, torch.float32, 1, "cpu"))
