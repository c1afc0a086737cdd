"""A re-sealed specialist manifest (seal recomputed after an edit) is still refused on load when a value
cannot be decided with: temperature, std, τ, classes, features, another specialist's model."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path

import msgspec
import numpy as np
import pytest

import zcompile
from zcompile.errors import ZcError
from zcompile.qroute.loading import load
from zcompile.qroute.manifest import Manifest, seal_manifest

ROOT = Path(__file__).parents[1]
SHIPPED = ROOT / "specialists" / "airline_chat"
WIDTH = msgspec.json.decode((SHIPPED / "manifest.json").read_bytes(), type=Manifest).features.dim
BAD_NUMBERS = (0.0, -0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf)


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")


@pytest.fixture(scope="module")
def shipped() -> Manifest:
    return msgspec.json.decode((SHIPPED / "manifest.json").read_bytes(), type=Manifest)


def copy(tmp_path: Path, m: Manifest, model: bytes | None = None) -> Path:
    """A specialist directory holding `m` re-sealed (its sha256 recomputed) and a model. ±infinity is
    written as ±1e999 and NaN as `NaN`: what a hand edit can write for them."""
    d = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "model.onnx").write_bytes(model if model is not None else (SHIPPED / "model.onnx").read_bytes())
    text = json.dumps(msgspec.to_builtins(seal_manifest(m)), indent=1)
    (d / "manifest.json").write_text(text.replace("-Infinity", "-1e999").replace("Infinity", "1e999"))
    return d


def replace(m: Manifest, path: str, value):
    """`m` with the value at a dotted path replaced (structs and dicts)."""
    head, _, rest = path.partition(".")
    if isinstance(m, dict):
        return {**m, head: replace(m[head], rest, value) if rest else value}
    inner = getattr(m, head)
    return msgspec.structs.replace(m, **{head: replace(inner, rest, value) if rest else value})


def mutations(m: Manifest, seed: int, n: int):
    """(path, value, words in the error) for `n` seeded edits that no distillation writes."""
    rng = random.Random(seed)
    numbers = [f"features.std.{k}" for k in m.features.std]
    kinds = [
        lambda: ("calibration.temperature", rng.choice(BAD_NUMBERS), "$.calibration.temperature"),
        lambda: ("calls.calibration.temperature", rng.choice(BAD_NUMBERS), "$.calls.calibration.temperature"),
        lambda: ("calls.calibration.bias", rng.choice((math.nan, math.inf, -math.inf)),
                 "$.calls.calibration.bias"),
        lambda: (rng.choice(numbers), rng.choice(BAD_NUMBERS), "is not a standard deviation"),
        lambda: (rng.choice(numbers).replace(".std.", ".mean."), rng.choice((math.nan, math.inf)),
                 "is not finite"),
        lambda: ("threshold.tau", rng.choice((math.nan, -0.5, 2.5, math.inf)), "$.threshold.tau"),
        lambda: ("calls.reply_threshold.tau", rng.choice((math.nan, -1.0, 7.0)),
                 "$.calls.reply_threshold.tau"),
        lambda: ("features.text_dim", rng.choice((0, -3)), "$.features.text_dim"),
        lambda: ("model.classes", _unknown_class(m, rng), "is not an action of the features"),
        lambda: ("model.classes", _repeat_class(m, rng), "is listed twice"),
        lambda: ("model.classes", (), "has no classes"),
        lambda: ("model.classes", m.model.classes[:-1], "classes"),
        lambda: ("features.actions", _drop_action(m, rng), "$.features"),
        lambda: ("features.fields", m.features.fields[1:], "$.features"),
        lambda: ("calls.params", {"think": 3}, "$.calls.params.think"),
    ]
    for _ in range(n):
        yield rng.choice(kinds)()


def _unknown_class(m, rng):
    classes = list(m.model.classes)
    classes[rng.randrange(len(classes))] = rng.choice(["refund", "deploy", "get_user", "respond2"])
    return tuple(classes)


def _repeat_class(m, rng):
    classes = list(m.model.classes)
    i, j = rng.sample(range(len(classes)), 2)
    classes[i] = classes[j]
    return tuple(classes)


def _drop_action(m, rng):
    actions = list(m.features.actions)
    del actions[rng.randrange(len(actions))]
    return tuple(actions)


def test_the_shipped_specialist_re_sealed_unchanged_loads(tmp_path, policy, shipped):
    s = load(copy(tmp_path, shipped), policy)
    assert s.model_classes == shipped.model.classes


@pytest.mark.parametrize("seed", range(3))
def test_re_sealed_values_that_cannot_be_decided_with_are_refused_by_path(tmp_path, policy, shipped, seed):
    seen = set()
    for path, value, words in mutations(shipped, seed, 12):
        d = copy(tmp_path, replace(shipped, path, value))
        with pytest.raises(ZcError) as e:
            load(d, policy)
        msg = str(e.value)
        if isinstance(value, float) and not math.isfinite(value):
            words = "not a specialist manifest"  # NaN is not JSON; ±1e999 is out of the decoder's range
        assert words in msg, (path, value, msg)
        assert str(d) in msg, msg  # names the file
        seen.add(path.split(".")[0])
    assert len(seen) >= 3


def test_refused_without_a_policy_too(tmp_path, shipped):
    for path, value, words in [("calibration.temperature", 0.0, "temperature"),
                               ("features.std.turn", -2.0, "standard deviation"),
                               ("model.classes", ("x",) + shipped.model.classes[1:], "not an action")]:
        with pytest.raises(ZcError, match=f"{words}.*; distil the specialist again"):
            load(copy(tmp_path, replace(shipped, path, value)))


def test_fields_of_a_re_sealed_manifest_are_checked_as_an_artifacts_are(tmp_path, shipped):
    f = shipped.features.fields[0]
    bad = msgspec.structs.replace(f, kind="enum", members=())
    with pytest.raises(ZcError, match=r"\$\.features: enum field .* has no members"):
        load(copy(tmp_path, replace(shipped, "features.fields", (bad,) + shipped.features.fields[1:])))


@pytest.fixture(scope="module")
def session():
    import onnxruntime as ort

    return ort.InferenceSession(str(SHIPPED / "model.onnx"), providers=["CPUExecutionProvider"])


def test_the_probes_cover_every_class(shipped, session):
    """One probe per class, each the training row where its class is likeliest; the model scores
    them as recorded (the shipped specialist loads)."""
    from zcompile.qroute.manifest import check_session

    classes = shipped.model.classes
    assert len(shipped.model.probes) == len(classes)
    for c, probe in zip(classes, shipped.model.probes):
        assert set(probe.probabilities) == set(classes)
        assert all(probe.probabilities[c] >= other.probabilities[c] for other in shipped.model.probes)
    check_session(shipped, session, "model.onnx")


def test_swapping_any_two_classes_is_refused(shipped, session):
    """Every pair of the shipped model's classes swapped in $.model.classes and re-sealed: refused,
    as a class order that does not match the model's outputs."""
    from zcompile.qroute.manifest import check_session, decode, encode

    classes = list(shipped.model.classes)
    pairs = [(a, b) for a in range(len(classes)) for b in range(a + 1, len(classes))]
    assert len(pairs) == len(classes) * (len(classes) - 1) // 2 >= 100
    for a, b in pairs:
        order = classes.copy()
        order[a], order[b] = order[b], order[a]
        # re-sealed: read
        m = decode(encode(replace(shipped, "model.classes", tuple(order))), "manifest.json")
        with pytest.raises(ZcError, match="the class order does not match the model's outputs"):
            check_session(m, session, "model.onnx")


def test_a_class_order_that_does_not_match_the_model_is_refused_on_load(tmp_path, policy, shipped):
    classes = list(shipped.model.classes)
    rare = min(range(len(classes)), key=lambda j: shipped.model.probes[j].probabilities[classes[j]])
    order = classes.copy()
    order[rare], order[rare - 1] = order[rare - 1], order[rare]  # the least confident class moved
    with pytest.raises(ZcError, match="the class order does not match the model's outputs"):
        load(copy(tmp_path, replace(shipped, "model.classes", tuple(order))), policy)


def test_probes_a_distillation_does_not_write_are_refused(tmp_path, shipped):
    probes = shipped.model.probes
    first = probes[0]
    c = shipped.model.classes[0]
    for value, words in [
        (probes[1:], r"14 probes for 15 classes"),
        ((), r"0 probes for 15 classes"),
        ((msgspec.structs.replace(first, row={**first.row, -1: 1.0}),) + probes[1:],
         r"probes\[0\]\.row\.-1: not a feature index with a finite value"),
        ((msgspec.structs.replace(first, row={**first.row, WIDTH: 1.0}),) + probes[1:],
         rf"probes\[0\]\.row\.{WIDTH}: outside the {WIDTH} features"),
        ((msgspec.structs.replace(first, probabilities={k: v for k, v in first.probabilities.items()
                                                        if k != c}),)
         + probes[1:], r"probes\[0\]\.probabilities: the classes differ"),
        ((msgspec.structs.replace(first, probabilities={**first.probabilities, c: 1.5}),) + probes[1:],
         rf"probabilities\.{c}: 1\.5 is not a probability"),
    ]:
        with pytest.raises(ZcError, match=words + ".*; distil the specialist again"):
            load(copy(tmp_path, replace(shipped, "model.probes", value)))
    moved = {**first.probabilities, c: first.probabilities[c] + 0.01}
    with pytest.raises(ZcError, match=r"probes\[0\] the model gives .* where distillation recorded .*: not "
                                      r"this "
                                      "specialist's model"):
        load(copy(tmp_path, replace(shipped, "model.probes",
                                    (msgspec.structs.replace(first, probabilities=moved),)
                                    + probes[1:])))


def _onnx_model(width, classes: int, symbolic: bool = False) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((width, classes), np.float32), "W")
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None if symbolic else width])
    y = helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                      [None, None if symbolic else classes])
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["z"]),
                               helper.make_node("Softmax", ["z"], ["probabilities"], axis=1)],
                              "foreign", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                             ir_version=9).SerializeToString()


@pytest.mark.parametrize("width, classes, symbolic, words", [
    (10, 15, False, f"the features are {WIDTH} wide"),
    (WIDTH, 3, False, "the model gives 3 classes"),
    (10, 15, True, f"cannot score rows of the {WIDTH} features"),
    (WIDTH, 4, True, "the model gives 4 classes"),
    # fits, scores otherwise
    (WIDTH, 15, False, "where distillation recorded .*: not this specialist's model"),
])
def test_another_model_behind_a_re_sealed_manifest_is_refused(tmp_path, policy, shipped, width, classes,
                                                              symbolic, words):
    import hashlib

    blob = _onnx_model(width, classes, symbolic)
    m = replace(shipped, "model.sha256", hashlib.sha256(blob).hexdigest())
    with pytest.raises(ZcError, match=words):
        load(copy(tmp_path, m, blob), policy)
    with pytest.raises(ZcError, match="does not match the sha256 in its manifest"):
        load(copy(tmp_path, shipped, blob), policy)  # not re-sealed: the model's sha256 refuses it


def test_a_manifest_nested_too_deeply_is_a_named_error(tmp_path, shipped):
    d = copy(tmp_path, shipped)
    text = (d / "manifest.json").read_bytes()
    deep = text.replace(b'"metrics": {', b'"metrics": {"deep": ' + b"[" * 5000 + b"]" * 5000 + b", ", 1)
    (d / "manifest.json").write_bytes(deep)
    with pytest.raises(ZcError, match="nested more than 200 levels deep"):
        load(d)


def test_a_fifo_manifest_or_model_is_refused_not_waited_on(tmp_path, shipped):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    d = copy(tmp_path, shipped)
    (d / "model.onnx").unlink()
    os.mkfifo(d / "model.onnx")
    with pytest.raises(ZcError, match="not a regular file"):
        load(d)
    e = tmp_path / "fifo"
    shutil.copytree(d, e, ignore=lambda *_: ["model.onnx", "manifest.json"])
    os.mkfifo(e / "manifest.json")
    with pytest.raises(ZcError, match="not a regular file"):
        load(e)


@pytest.mark.parametrize("name", ["../model.onnx", "/etc/passwd", ".hidden", "a/b"])
def test_a_model_file_outside_the_directory_is_refused_even_re_sealed(tmp_path, shipped, name):
    with pytest.raises(ZcError, match=r"\$\.model\.file: .* is not a plain file name"):
        load(copy(tmp_path, replace(shipped, "model.file", name)))


def test_a_version_4_manifest_reads_and_encodes_byte_for_byte():
    """Version 5 added `model.text_probes`; a version 4 manifest is sealed, identified and written
    without it, so a specialist distilled before reads unchanged (the fixture: the manifest shipped
    before issue 25, its seal checked on decode)."""
    import gzip

    from zcompile.qroute.manifest import decode, encode

    data = gzip.decompress((Path(__file__).parent / "fixtures" / "manifest_v4.json.gz").read_bytes())
    m = decode(data, "manifest.json")
    assert m.version == 4 and m.model.text_probes == () and encode(m) == data


def test_the_shipped_manifest_is_version_6(policy):
    from zcompile.qroute.manifest import MANIFEST_VERSION, decode, encode

    data = (SHIPPED / "manifest.json").read_bytes()
    m = decode(data, "manifest.json")
    assert m.version == MANIFEST_VERSION == 6 and encode(m) == data
    assert load(SHIPPED, policy).manifest == m


def test_text_probes_on_a_tabular_model_are_refused(shipped, policy, tmp_path):
    from zcompile.qroute.manifest import TextProbe

    probes = tuple(TextProbe("turn: 0", {c: 0.0 for c in shipped.model.classes})
                   for _ in shipped.model.classes)
    d = copy(tmp_path, replace(shipped, "model.text_probes", probes))
    with pytest.raises(ZcError, match=r"\$\.model\.text_probes: a model that reads feature rows has no text "
                                      r"probes"):
        load(d, policy)
