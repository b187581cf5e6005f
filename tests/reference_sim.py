"""A plain SimPy reference of the core timing model, for tests only.

One generator process per op waits for the events of all its predecessors (data
dependencies, the op ``units`` places before it in its pipeline's stream, the op
that frees the buffer it takes, the previous op in issue order of a role in ``take_turns``, of its own row under
``turns_within: row``), then holds a slot
of its pipeline, a
``simpy.Resource`` of ``units`` slots, for its cycles. Pipelines that share an
instruction stream (``shares_issue_with``) share one stream and one resource. Under
``units_by: row`` each unit is a resource of one slot serving the rows r with
r mod units equal to its index, and an op waits for its row group's previous op there. An op of a kind with a
result latency L (``result_latency``) triggers a second event L cycles after it starts, or when it ends if later,
which its data dependents and the op taking its turn after it wait for instead. Written from the model's
description and independently of ``vfasim.sim``: slow, but obviously right.
"""

from __future__ import annotations

import math

import simpy

from vfasim.hw.config import FUSED, HardwareConfig, Pipeline
from vfasim.trace import BUFFERS, DTYPES, KIND_NAMES, OP_KINDS, Trace


def reference_simulate(trace: Trace, hw: HardwareConfig, schedule: str) -> tuple[list[int], list[int]]:
    """(start, end) cycles of every op."""
    n = len(trace)
    names = list(hw.pipelines)
    pipe = [-1 if hw.op_map[KIND_NAMES[k]] == FUSED else names.index(hw.op_map[KIND_NAMES[k]])
            for k in trace.kind.tolist()]
    preds = predecessors(trace, hw, pipe, schedule)
    data = [set(trace.deps_of(i).tolist()) | turn for i, turn in enumerate(turns(trace, hw, pipe, schedule))]
    latency = [hw.result_latency.get(KIND_NAMES[k], 0) for k in trace.kind.tolist()]
    env = simpy.Environment()
    done = [env.event() for _ in range(n)]
    ready = [env.event() for _ in range(n)]
    heads = [p.shares_issue_with or name for name, p in hw.pipelines.items()]  # a shared stream: one resource
    shared = {h: simpy.Resource(env, capacity=hw.pipelines[h].units) for h in dict.fromkeys(heads)}
    per_row = {h: [simpy.Resource(env, capacity=1) for _ in range(hw.pipelines[h].units)]
               for h in dict.fromkeys(heads) if hw.pipelines[h].units_by == "row"}

    def slot_of(i: int) -> simpy.Resource:
        h = heads[pipe[i]]
        return per_row[h][int(trace.row[i]) % len(per_row[h])] if h in per_row else shared[h]
    start, end = [0] * n, [0] * n

    def op(i: int):
        yield simpy.AllOf(env, [ready[p] for p in data[i]] + [done[p] for p in preds[i] - data[i]])
        if pipe[i] >= 0:
            with slot_of(i).request() as slot:
                yield slot
                start[i] = env.now
                yield env.timeout(price(trace, hw, i))
        else:
            start[i] = env.now
        end[i] = env.now
        done[i].succeed()
        yield env.timeout(max(start[i] + latency[i] - end[i], 0))
        ready[i].succeed()

    for i in range(n):
        env.process(op(i))
    env.run()
    assert all(e.triggered for e in done), "reference deadlocked"
    return start, end


def price(trace: Trace, hw: HardwareConfig, i: int) -> int:
    """Full cycles; for a pipeline with issue_share s < 1, the cycles it holds its shared stream: s of its body, but no
    less than its full cycles less those of the other ops of its tile (the run of consecutive ops with its row and
    step) that hold the same stream whole."""
    p = _pipeline(trace, hw, i)
    if p.issue_share == 1.0:
        return _full(trace, hw, i)
    kind, dtype = KIND_NAMES[trace.kind[i]], DTYPES[trace.dtype[i]]
    rate = p.throughput["bytes" if OP_KINDS[kind][1] == "bytes" else dtype]
    held = p.startup_cycles + math.ceil(int(trace.work[i]) * hw.work_factor.get(kind, 1.0) / rate * p.issue_share) \
        + p.issue_overhead_cycles
    lo, hi = i, i
    while lo > 0 and (trace.row[lo - 1], trace.step[lo - 1]) == (trace.row[i], trace.step[i]):
        lo -= 1
    while hi + 1 < len(trace) and (trace.row[hi + 1], trace.step[hi + 1]) == (trace.row[i], trace.step[i]):
        hi += 1
    stream = p.shares_issue_with
    others = sum(_full(trace, hw, j) for j in range(lo, hi + 1)
                 if hw.op_map[KIND_NAMES[trace.kind[j]]] != FUSED and _pipeline(trace, hw, j).issue_share == 1.0
                 and stream in (hw.op_map[KIND_NAMES[trace.kind[j]]], _pipeline(trace, hw, j).shares_issue_with))
    return max(held, _full(trace, hw, i) - others)


def _pipeline(trace: Trace, hw: HardwareConfig, i: int) -> Pipeline:
    return hw.pipelines[hw.op_map[KIND_NAMES[trace.kind[i]]]]


def _full(trace: Trace, hw: HardwareConfig, i: int) -> int:
    kind, dtype = KIND_NAMES[trace.kind[i]], DTYPES[trace.dtype[i]]
    p = hw.pipelines[hw.op_map[kind]]
    rate = p.throughput["bytes" if OP_KINDS[kind][1] == "bytes" else dtype]
    body = math.ceil(int(trace.work[i]) * hw.work_factor.get(kind, 1.0) / rate)
    return p.startup_cycles + body + p.issue_overhead_cycles


def predecessors(trace: Trace, hw: HardwareConfig, pipe: list[int], schedule: str) -> list[set[int]]:
    n = len(trace)
    preds = [set(trace.deps_of(i).tolist()) for i in range(n)]
    if schedule == "serial":
        for i in range(1, n):
            preds[i].add(i - 1)
        return preds
    order = issue_order(trace, hw.score_buffers)
    heads = [spec.shares_issue_with or name for name, spec in hw.pipelines.items()]
    for head in dict.fromkeys(heads):
        stream = [i for i in order if pipe[i] >= 0 and heads[pipe[i]] == head]
        units = hw.pipelines[head].units
        if hw.pipelines[head].units_by == "row":
            for u in range(units):
                mine = [i for i in stream if int(trace.row[i]) % units == u]
                for a, b in zip(mine, mine[1:]):
                    preds[b].add(a)
            continue
        for k in range(units, len(stream)):
            preds[stream[k]].add(stream[k - units])
    for b in range(len(BUFFERS)):
        takes = [i for i in range(n) if trace.take_buffer[i] == b]
        frees = [i for i in range(n) if trace.free_buffer[i] == b]
        for k in range(hw.score_buffers, len(takes)):
            preds[takes[k]].add(frees[k - hw.score_buffers])
    for i, turn in enumerate(turns(trace, hw, pipe, schedule)):
        preds[i] |= turn
    return preds


def turns(trace: Trace, hw: HardwareConfig, pipe: list[int], schedule: str) -> list[set[int]]:
    """Per op, the op of a ``take_turns`` role it takes its turn after (none under ``serial``)."""
    after: list[set[int]] = [set() for _ in range(len(trace))]
    if schedule == "serial":
        return after
    order = issue_order(trace, hw.score_buffers)
    roles = [spec.role for spec in hw.pipelines.values()]
    taking = [i for i in order if pipe[i] >= 0 and roles[pipe[i]] in hw.take_turns]  # take_turns: one at a time
    for r in sorted({int(trace.row[i]) for i in taking}) if hw.turns_within == "row" else [None]:
        mine = [i for i in taking if r is None or int(trace.row[i]) == r]  # turns_within row: each row on its own
        for a, b in zip(mine, mine[1:]):
            after[b].add(a)
    return after


def issue_order(trace: Trace, buffers: int) -> list[int]:
    """Ops sorted by (tile index + min(stage, B - 1), stage, id); prelude ops take the next tile's index."""
    keys, seen, g = [], 0, -math.inf
    for i in range(len(trace)):
        new_group = i == 0 or (trace.row[i], trace.step[i]) != (trace.row[i - 1], trace.step[i - 1])
        seen += int(trace.kblock[i] >= 0 and new_group)
        g = max(g, seen if trace.step[i] == 0 else seen - 1)
        stage = int(trace.stage[i])
        keys.append((g + min(stage, buffers - 1), stage, i))
    return [i for *_, i in sorted(keys)]
