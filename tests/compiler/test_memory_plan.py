"""Liveness-based memory planning on hand-written execution plans."""
from tensorkiln.compiler.memory_plan import plan_memory
from tensorkiln.runtime.plan import ExecutionPlan, KernelStep, ValueInfo


def _value(i, kind="intermediate", shape=(256,), dtype="float32"):
    return ValueInfo(i, shape, dtype, kind, f"v{i}")


def _chain(n_steps: int, ops=("nn.conv2d",)) -> ExecutionPlan:
    values = [_value(0, "input")] + [_value(i) for i in range(1, n_steps + 1)]
    values[-1] = _value(n_steps, "output")
    steps = [KernelStep(f"k{i}", "cpu_llvm", (i,), (i + 1,), ops) for i in range(n_steps)]
    return ExecutionPlan(tuple(values), tuple(steps), (0,), (n_steps,))


def test_chain_reuses_two_buffers():
    plan = plan_memory(_chain(6))
    # a chain needs only ping-pong buffers: each step reads one and writes the other
    assert len(plan.storages) == 2
    assert sum(s.nbytes for s in plan.storages) == 2 * 256 * 4
    storages = [plan.values[i].storage for i in range(1, 7)]
    assert all(a != b for a, b in zip(storages, storages[1:]))


def test_no_reuse_gives_each_value_its_own_storage():
    plan = plan_memory(_chain(6), reuse=False)
    assert len(plan.storages) == 6


def test_elementwise_steps_run_in_place():
    plan = plan_memory(_chain(5, ops=("nn.relu",)))
    assert len(plan.storages) == 1


def test_values_still_needed_are_not_overwritten():
    # v1 is read by the last step, so it must keep its storage until then
    values = (_value(0, "input"), _value(1), _value(2), _value(3), _value(4, "output"))
    steps = (KernelStep("a", "cpu_llvm", (0,), (1,), ("nn.conv2d",)),
             KernelStep("b", "cpu_llvm", (1,), (2,), ("nn.conv2d",)),
             KernelStep("c", "cpu_llvm", (2,), (3,), ("nn.conv2d",)),
             KernelStep("d", "cpu_llvm", (3, 1), (4,), ("add",)))
    plan = plan_memory(ExecutionPlan(values, steps, (0,), (4,)))
    live_with_v1 = [plan.values[i].storage for i in (2, 3, 4)]
    assert plan.values[1].storage not in live_with_v1[:2]


def test_sizes_are_respected_and_offsets_aligned():
    values = (_value(0, "input"), _value(1, shape=(1000,)), _value(2, shape=(10,)), _value(3, "output", shape=(3000,)))
    steps = (KernelStep("a", "cpu_llvm", (0,), (1,), ("nn.conv2d",)),
             KernelStep("b", "cpu_llvm", (1,), (2,), ("nn.conv2d",)),
             KernelStep("c", "cpu_llvm", (2,), (3,), ("nn.conv2d",)))
    plan = plan_memory(ExecutionPlan(values, steps, (0,), (3,)))
    by_id = {s.id: s for s in plan.storages}
    for value in plan.values[1:]:
        assert by_id[value.storage].nbytes >= value.nbytes
    assert all(s.offset % 64 == 0 for s in plan.storages)
    spans = sorted((s.offset, s.offset + s.nbytes) for s in plan.storages)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def test_plan_json_round_trip():
    plan = plan_memory(_chain(3))
    assert ExecutionPlan.from_json(plan.to_json()) == plan
