"""kdtree-engine's own clauses (spec/engine.md): command line, op files, its own validation, batch mode,
the libFuzzer smoke run over the op input path."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import re
import signal
import subprocess

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contract
import kdtr
from harness import engine, kdtree_cpu, profiles, tools
from harness import strategies as hh
from harness.compare import assert_bit_exact
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build
from reference import tree_verify as ref_verify

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPS = ("tree_build", "tree_verify", "tree_accept")


@pytest.fixture(scope="module", autouse=True)
def exe(request):
    """The engine binary; every test here needs it (the ones calling harness.engine too), so a machine that
    has not built it skips them with the reason (fails them under --require-tools)."""
    return tools.required_binary(request.config, "kdtree-engine")


def cli(exe, *args, stdin=None):
    out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, input=stdin, timeout=120)
    assert out.returncode >= 0, f"kdtree-engine ended by signal {signal.Signals(-out.returncode).name}: {out.stderr}"
    return out


# --- valid op files ---------------------------------------------------------------------------------------
def build_inputs(seed=0, bs=2, L=3, K=4, B=6, prefix=5):
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, K), "bf16", 0.0)
    ids = np.stack([np.stack([rng.permutation(100)[:K] for _ in range(L)]) for _ in range(bs)]).astype(np.int32)
    return {
        "top_logp": lp,
        "top_ids": ids,
        "root_tokens": np.arange(bs, dtype=np.int32) + 500,
        "budget": np.array(B, np.int32),
        "prefix_lens": np.full(bs, prefix, np.int32),
    }


def verify_inputs(seed=0, dtype=np.float32, Q=3, H=2, prefix=(5,), page_size=4):
    rng = np.random.default_rng(seed)
    par = np.array([-1, 0, 0, 1, 3][:Q], np.int32)
    pre = np.array(prefix, np.int32)
    bs = len(pre)
    parents = np.tile(par, (bs, 1))
    vis = ref_build.layouts(parents, np.tile(hh.depths_of(par), (bs, 1)), np.full(bs, Q, np.int32), pre)[0]
    q, kv, bt = hh.build_paged_cache(rng, dtype, pre, Q, page_size, H)
    return {
        "q": q,
        "kv_cache": kv,
        "block_table": bt,
        "prefix_lens": pre,
        "visibility": vis,
        "softmax_scale": np.array(0.130861, np.float64),
    }


def accept_inputs(commit=False, dtype=np.float32):
    par = np.array([[-1, 0, 0, 1, -1]], np.int32)
    fc, ns = hh.links_of(par[0, :4], 5)
    t = {
        "tokens": np.array([[9, 5, 6, 7, 9]], np.int32),
        "first_child": fc[None],
        "next_sibling": ns[None],
        "target_tokens": np.array([[5, 7, 0, 1, 0]], np.int32),
        "max_depth": np.array(2, np.int32),
    }
    if commit:
        t["kv_cache"] = np.arange(3 * 4 * 576, dtype=np.float32).reshape(3, 4, 576).astype(dtype)
        t["block_table"] = np.array([[2, 0]], np.int32)
        t["prefix_lens"] = np.array([1], np.int32)
    return t


def example_op_files() -> dict[str, bytes]:
    """Small valid op files of every op (the fuzzer's seeds)."""
    files = {}
    for s in range(3):
        t = build_inputs(seed=s, bs=1 + s, B=2 + 3 * s)
        if s == 2:
            t["with_full_mask"] = np.array(True)
        files[f"build{s}.kdtr"] = kdtr.dumps(t, {"op": "tree_build"})
    files["build_nometa.kdtr"] = kdtr.dumps(build_inputs(seed=4))
    for s, dt in enumerate((np.float32, ml_dtypes.bfloat16)):
        t = verify_inputs(seed=s, dtype=dt, Q=2 + s, H=1, prefix=(1,), page_size=1)
        files[f"verify{s}.kdtr"] = kdtr.dumps(t, {"op": "tree_verify"})
    files["accept0.kdtr"] = kdtr.dumps(accept_inputs(), {"op": "tree_accept"})
    acc = accept_inputs(commit=True, dtype=ml_dtypes.bfloat16)
    acc["kv_cache"] = acc["kv_cache"][:, :1].copy()
    acc["block_table"] = np.array([[2, 0, 1, 2, 0, 1]], np.int32)
    files["accept1.kdtr"] = kdtr.dumps(acc, {"op": "tree_accept"})
    rng = np.random.default_rng(5)
    for s, dt in enumerate((np.float32, np.float16, ml_dtypes.bfloat16)):
        x = (rng.standard_normal((1 + s, 2, 9)) * 3).astype(np.float32)
        x[0, 0, :4] = -np.inf
        files[f"topk{s}.kdtr"] = kdtr.dumps({"logits": x.astype(dt), "K": np.array(5, np.int32)}, {"op": "draft_topk"})
    return files


# --- EN.1 Command line ------------------------------------------------------------------------------------
@pytest.mark.spec("EN.1.1")
def test_help_explains_every_subcommand(exe):
    top = cli(exe, "--help")
    assert top.returncode == 0
    for sub in ("op", "batch", "serve", "decode", "help"):
        assert re.search(rf"^\s+{sub}\b", top.stdout, re.M), f"--help does not list {sub}"
    op = cli(exe, "op", "--help")
    assert op.returncode == 0
    names = [*contract.Tree.FIELDS, *contract.Accept.FIELDS, "top_logp", "softmax_scale", "with_full_mask", "lse"]
    for name in names:
        assert name in op.stdout, f"op --help does not name {name}"
    for sub, words in {"batch": ["ok", "error"], "serve": ["standard input"], "decode": ["--mode", "--budget"]}.items():
        h = cli(exe, sub, "--help")
        assert h.returncode == 0 and all(w in h.stdout for w in words), h.stdout
    assert cli(exe, "help", "decode").stdout == cli(exe, "decode", "--help").stdout


@pytest.mark.spec("EN.1.2")
@pytest.mark.parametrize(
    "args,status,message",
    [
        ((), 2, "usage"),
        (("frobnicate",), 2, "no subcommand 'frobnicate'"),
        (("op", "tree_build", "--in", "x"), 2, "--out: required"),
        (("op", "tree_build", "--in"), 2, "--in: needs a value"),
        (("op", "tree_grow", "--in", "a", "--out", "b"), 2, "OP 'tree_grow'"),
        (("op", "tree_build", "--in", "a", "--out", "b", "--colour", "red"), 2, "unknown option '--colour'"),
        (
            ("op", "tree_build", "--in", "a", "--out", "b", "--threads", "many"),
            2,
            "--threads: 'many' is not an integer",
        ),
        (("op", "tree_build", "--in", "a", "--out", "b", "--device", "tpu"), 2, "--device: 'tpu' is not cpu or cuda"),
        (("op", "tree_build", "--in", "a", "--out", "b", "--variant", "heap_smem"), 2, "--variant: kernel variants"),
        (
            ("op", "tree_build", "--in", "/nonexistent/in.kdtr", "--out", "b"),
            1,
            "/nonexistent/in.kdtr: not a valid KDTR",
        ),
        (("batch", "/nonexistent/list"), 1, "/nonexistent/list: cannot open"),
    ],
    ids=lambda x: x if isinstance(x, int) else None,
)
def test_bad_command_lines_are_named(exe, args, status, message):
    out = cli(exe, *args)
    assert out.returncode == status, out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.spec("EN.1.2")
def test_bad_files_are_named_and_leave_no_output(exe, tmp_path):
    good = kdtr.dumps(build_inputs())
    cases = {
        "truncated.kdtr": (good[:50], "truncated.kdtr: not a valid KDTR file: E01"),
        "crc.kdtr": (good[:-1] + bytes([good[-1] ^ 1]), "crc.kdtr: not a valid KDTR file: E12"),
        "empty.kdtr": (b"", "empty.kdtr: not a valid KDTR file: E01"),
        "wrong-op.kdtr": (
            kdtr.dumps(build_inputs(), {"op": "tree_accept"}),
            "op: the file's metadata says op=tree_accept",
        ),
    }
    for name, (data, message) in cases.items():
        src, dst = tmp_path / name, tmp_path / f"out-{name}"
        src.write_bytes(data)
        out = cli(exe, "op", "tree_build", "--in", src, "--out", dst)
        assert out.returncode == 1 and message in out.stderr, (name, out.stderr)
        assert not dst.exists() and not list(tmp_path.glob("*.tmp-kdtree")), name


# --- EN.2 Op files ----------------------------------------------------------------------------------------
@pytest.mark.spec("EN.2.1")
@pytest.mark.parametrize("op", OPS)
def test_op_files_follow_the_contract(exe, tmp_path, op):
    """The `op` subcommand on a file: outputs named like the result fields, metadata op, same values."""
    inputs = {"tree_build": build_inputs(), "tree_verify": verify_inputs(), "tree_accept": accept_inputs(True)}[op]
    src, dst = tmp_path / "in.kdtr", tmp_path / "out.kdtr"
    src.write_bytes(kdtr.dumps(inputs, {"op": op}))
    out = cli(exe, "op", op, "--in", src, "--out", dst, "--threads", "2")
    assert out.returncode == 0, out.stderr
    got = kdtr.load(dst)
    assert got.metadata == {"op": op}
    t = {k: np.array(a) for k, a in inputs.items()}
    if op == "tree_build":
        want = ref_build.tree_build(t["top_logp"], t["top_ids"], t["root_tokens"], int(t["budget"]), t["prefix_lens"])
        fields = {f: getattr(want, f) for f in contract.Tree.FIELDS}
        fields["full_mask"] = np.zeros(0, bool)  # opt-in (with_full_mask absent)
    elif op == "tree_accept":
        acc = ref_accept.tree_accept(
            t["tokens"],
            t["first_child"],
            t["next_sibling"],
            t["target_tokens"],
            max_depth=int(t["max_depth"]),
            kv_cache=t["kv_cache"],
            block_table=t["block_table"],
            prefix_lens=t["prefix_lens"],
        )
        fields = {f: getattr(acc, f) for f in contract.Accept.FIELDS} | {"kv_cache": t["kv_cache"]}
    else:
        o, lse = ref_verify.tree_verify(*(t[k] for k in list(t)[:5]), float(t["softmax_scale"]))
        fields = {"out": o, "lse": lse}
    assert set(got.infos) == set(fields)
    for name, want in fields.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        if op != "tree_verify":
            assert got[name].tobytes() == np.ascontiguousarray(want).tobytes(), name
        else:
            np.testing.assert_allclose(got[name], want, rtol=2e-5, atol=3e-5)


@pytest.mark.spec("EN.2.1")
def test_op_file_names_are_checked():
    good = build_inputs()
    with pytest.raises(engine.EngineError, match=r"^prefix_lens: missing from the op file"):
        engine.run_op("tree_build", {k: a for k, a in good.items() if k != "prefix_lens"})
    with pytest.raises(engine.EngineError, match=r"^in.budget: is not an input of tree_build"):
        engine.run_op("tree_build", {**good, "in.budget": good["budget"]})
    with pytest.raises(engine.EngineError, match=r"^with_full_mask: dtype int32, expected bool"):
        engine.run_op("tree_build", {**good, "with_full_mask": np.array(1, np.int32)})
    with pytest.raises(engine.EngineError, match=r"^budget: expected a scalar \(a rank-0 tensor\)"):
        engine.run_op("tree_build", {**good, "budget": np.array([6], np.int32)})
    with pytest.raises(engine.EngineError, match=r"^softmax_scale: dtype int32, expected float64"):
        engine.run_op("tree_verify", {**verify_inputs(), "softmax_scale": np.array(1, np.int32)})
    with pytest.raises(
        engine.EngineError,
        match=r"^kv_cache: needs kv_cache, block_table, prefix_lens together \(kv_cache, prefix_lens missing\)$",
    ):
        engine.run_op("tree_accept", {**accept_inputs(), "block_table": np.zeros((1, 2), np.int32)})
    full = engine.run_op("tree_build", {**good, "with_full_mask": np.array(True)})["full_mask"]
    args = [good[k] for k in ("top_logp", "top_ids", "root_tokens")]
    want = ref_build.tree_build(*args, int(good["budget"]), good["prefix_lens"], with_full_mask=True).full_mask
    assert full.tobytes() == want.tobytes() and full.shape == want.shape


def _as_tensor(a) -> np.ndarray:
    """Python scalars become rank-0 tensors as the adapter writes them; anything else goes in as it is."""
    if isinstance(a, (bool, np.bool_)):
        return np.array(bool(a))
    if isinstance(a, float):
        return np.array(a, np.float64)
    if isinstance(a, int):
        return np.array(a, np.int32)
    return np.asarray(a)


def _contract_cases():
    """Every bad-input case of the op conformance tests, as (op, tensors by the contract's KDTR names,
    message regex). Cases about the Python objects themselves (a masked array, a list, a CUDA array, a bool
    where an int belongs) have no op-file form and are left out: the engine sees only files."""
    mods = {op: importlib.import_module(f"conformance.test_{op}") for op in contract.OPS}
    cases = []
    for p in mods["tree_build"].BAD:
        arg, value, message = p.values
        cases.append(("tree_build", mods["tree_build"]._bad_case(arg, value), message, f"build-{p.id}"))
    for p in mods["tree_verify"].BAD:
        changes, message = p.values
        cases.append(("tree_verify", mods["tree_verify"].valid_case().with_args(**changes), message, f"verify-{p.id}"))
    for p in mods["tree_accept"].BAD:
        case, message = p.values
        cases.append(("tree_accept", case, message, f"accept-{p.id}"))
    for p in mods["draft_topk"].BAD:
        case, message = p.values
        cases.append(("draft_topk", case, message, f"topk-{p.id}"))
    cases += _topk_bad_values()
    out = []
    for op, case, message, name in cases:
        c = contract.OPS[op]
        kinds = {a.name: a.kind for a in c.args}
        if any(_python_only(v, kinds[k]) for k, v in case.args.items()):
            continue
        tensors = {a.name: _as_tensor(case.args[a.name]) for a in c.args if case.args.get(a.name) is not None}
        out.append(pytest.param(op, tensors, message, id=name))
    return out


def _topk_bad_values() -> list:
    """draft_topk's value checks at every request and depth of a [2, 3, 5] batch, in every logits dtype: a NaN
    or a +inf at a token that moves along the rows (the engine's own scan, which engine-cpu's Python checks
    would otherwise answer first), each named by its place, beside a -inf (allowed) in the last row."""
    from harness.cases import Case

    out = []
    for dt in (np.float32, np.float16, contract.BF16):
        name = np.dtype(dt).name
        for b in range(2):
            for d in range(3):
                v = (2 * b + d) % 5
                for bad, word in ((np.nan, "NaN"), (np.inf, r"\+inf")):
                    x = np.zeros((2, 3, 5), dt)
                    x[b, d, v] = bad
                    x[1, 2, 4] = -np.inf if (b, d) != (1, 2) else x[1, 2, 4]  # -inf elsewhere is allowed
                    message = rf"logits: {word} at \[request {b}, depth {d}, token {v}\]"
                    out.append(
                        (
                            "draft_topk",
                            Case("draft_topk", {"logits": x, "K": 2}),
                            message,
                            f"topk-{name}-{'nan' if word == 'NaN' else 'inf'}-b{b}-d{d}",
                        )
                    )
    return out


def _python_only(v, kind: str) -> bool:
    """A value only a Python caller can pass (the op file would hold something else)."""
    return (
        isinstance(v, (list, str))
        or (isinstance(v, (bool, np.bool_)) and kind != "flag")
        or (isinstance(v, np.ndarray) and type(v) is not np.ndarray)
        or hasattr(v, "__cuda_array_interface__")
    )


# Values an op file carries converted: the engine words the problem for what it sees (the argument named
# stays the same).
FILE_WORDING = {
    "build-budget-float": "budget: expected an integer, got float64",
    "build-full-mask-int": "with_full_mask: dtype int32, expected bool",
}


def _contract_says(op: str, tensors: dict) -> str | None:
    """The contract's message for an op file's inputs read back as arguments; None when it accepts them."""
    c = contract.OPS[op]
    try:
        c.validate(**c.args_from_kdtr(tensors))
    except contract.InputError as e:
        return str(e)
    return None


def _engine_says(op: str, tensors: dict) -> str | None:
    """The engine's message for an op file (no Python checks on the way); None when it runs the op."""
    try:
        engine.run_op(op, tensors)
    except engine.EngineError as e:
        return str(e)
    return None


@pytest.mark.spec("EN.2.2")
@pytest.mark.parametrize("op,tensors,message", _contract_cases())
def test_engine_validates_op_files_itself(request, op, tensors, message):
    """No Python checks on the way: the engine's own message names the argument, in the contract's words;
    where the contract refuses the file's own values too, the engine's message is the contract's, verbatim."""
    tensors = {k: _as_tensor(a) for k, a in tensors.items()}
    with pytest.raises(engine.EngineError) as e:
        engine.run_op(op, tensors)
    got = str(e.value)
    want = FILE_WORDING.get(request.node.callspec.id)
    if want is not None:
        assert got.startswith(want), got
    else:
        assert re.search(message, got), f"engine said {got!r}, the contract says {message!r}"
    named = re.match(r"\w+: ", message)
    if named:
        assert got.startswith(named.group(0)), f"engine said {got!r}, not naming {named.group(0)!r}"
    said = _contract_says(op, tensors)
    if said is not None:
        assert got == said, f"engine said {got!r}, the contract on the same file says {said!r}"


VALID_INPUTS = {
    "tree_build": build_inputs,
    "tree_verify": lambda: verify_inputs(Q=5, prefix=(5, 2)),
    "tree_accept": lambda: accept_inputs(commit=True),
    "draft_topk": lambda: {"logits": np.zeros((2, 3, 8), np.float32), "K": np.array(4, np.int32)},
}


def _symbol_cases():
    """Every shape symbol of every op just outside its range, in the first array that names it (the one
    the contract's message names), where such an array stays small."""
    out = []
    for op, c in contract.OPS.items():
        for s in c.symbols:
            if s.name in c.derived:
                continue
            arg = next(a for a in c.args if a.kind == "array" and s.name in a.shape)
            for n in (s.lo - 1, s.hi + 1):
                if n >= 0 and s.hi + 1 <= 2**20:
                    out.append(pytest.param(op, arg.name, arg.shape.index(s.name), n, id=f"{op}-{s.name}={n}"))
    out.append(pytest.param("tree_verify", "visibility", 2, 2, id="tree_verify-W=2"))  # derived: must agree
    return out


@pytest.mark.spec("EN.2.2")
@pytest.mark.parametrize("op,arg,axis,n", _symbol_cases())
def test_engine_checks_every_shape_symbol(op, arg, axis, n):
    """Dimensions the replayed cases do not reach (Q, D, max_pages, bs = 0, ...): the contract's message."""
    tensors = VALID_INPUTS[op]()
    shape = list(tensors[arg].shape)
    shape[axis] = n
    tensors[arg] = np.zeros(shape, tensors[arg].dtype)
    said = _contract_says(op, tensors)
    assert said is not None and said.startswith(f"{arg}: ")
    assert _engine_says(op, tensors) == said


def _visibility_with(rows: dict) -> dict:
    t = VALID_INPUTS["tree_verify"]()
    for (b, i), word in rows.items():
        t["visibility"][b, i, 0] = word
    return t


def _accept_two_requests(table, prefix=(0, 0), num_pages=8, page_size=1) -> dict:
    t = accept_inputs()
    t = {k: np.repeat(a, 2, axis=0) if a.ndim == 2 else a for k, a in t.items()}
    t["kv_cache"] = np.zeros((num_pages, page_size, 576), np.float32)
    t["block_table"] = np.array(table, np.int32)
    t["prefix_lens"] = np.array(prefix, np.int32)
    return t


def _accept_linked_pads() -> dict:
    """Pads 2 -> 3 -> 4 linked among themselves but not to the root: depth 0 for the contract."""
    t = accept_inputs()
    t["first_child"] = np.array([[1, -1, 3, 4, -1]], np.int32)
    t["next_sibling"] = np.full((1, 5), -1, np.int32)
    t["max_depth"] = np.array(1, np.int32)
    return t


def _build_at_context_limit(over: int) -> dict:
    t = build_inputs(B=6)
    t["prefix_lens"] = np.array([contract.limits.MAX_CONTEXT - 7 + over, 0], np.int32)
    return t


def _build_full_mask_over_limit() -> dict:
    """1024 requests of 1025 rows near the context limit: a FULL_MASK of ~2.7e11 bytes, refused up front."""
    bs, B = 1024, 1024
    return {
        "top_logp": np.zeros((bs, 1, 1), np.float32),
        "top_ids": np.zeros((bs, 1, 1), np.int32),
        "root_tokens": np.zeros(bs, np.int32),
        "budget": np.array(B, np.int32),
        "prefix_lens": np.full(bs, contract.limits.MAX_CONTEXT - 1 - B, np.int32),
        "with_full_mask": np.array(True),
    }


# Contract rules the replayed cases do not pin down: which error comes first, which pair or row is named.
EXACT = [
    pytest.param("tree_verify", lambda: _visibility_with({(0, 1): 0b10111}), "row 1 sees a later row 4", id="later"),
    pytest.param(
        "tree_verify",
        lambda: _visibility_with({(1, 2): 0b111, (1, 3): 0b1101, (0, 4): 0b11001}),
        "request 0 row 4 is not its parent's row plus itself",
        id="closure-request-order",
    ),
    pytest.param(
        "tree_accept",
        lambda: _accept_two_requests([[5, 3, 1, 6, 7], [2, 3, 4, 5, 0]]),
        "request 0 position 1 and request 1 position 1 map to the same cache row 3",
        id="alias-smallest-row",
    ),
    pytest.param(
        "tree_accept",
        lambda: _accept_two_requests([[0, 1], [1, 2]], prefix=(3, 1), num_pages=3, page_size=4),
        "request 0 position 5 and request 1 position 1 map to the same cache row 5",
        id="alias-across-pages",
    ),
    pytest.param("tree_accept", _accept_linked_pads, None, id="unreached-pads-depth-0"),
    pytest.param(
        "tree_accept",
        lambda: {**accept_inputs(), "tokens": np.array([[9, 5, 6, 7, -1]], np.int32), "max_depth": np.array(0)},
        r"tokens: negative token id at \(0, 4\)",
        id="tokens-before-depth",
    ),
    pytest.param("tree_build", lambda: _build_at_context_limit(0), None, id="context-limit-inclusive"),
    pytest.param(
        "tree_build",
        lambda: _build_at_context_limit(1),
        "request 0: prefix 262138 \\+ 7 tree rows = 262145 exceeds the context limit 262144",
        id="context-one-over",
    ),
    pytest.param(
        "tree_build",
        _build_full_mask_over_limit,
        r"^with_full_mask: the FULL_MASK layout would take 275146342400 bytes .* more than 2147483647",
        id="full-mask-over-limit",
    ),
]


@pytest.mark.spec("EN.2.2")
@pytest.mark.parametrize("op,make,message", EXACT)
def test_engine_reports_the_contracts_first_error(op, make, message):
    tensors = make()
    said = _contract_says(op, tensors)
    assert (said is None) if message is None else re.search(message, said), said
    assert _engine_says(op, tensors) == said


_MUTANTS = {
    "int32": [-(2**31), -7, -1, 0, 1, 2, 3, 4, 5, 6, 9, 33, 1025, 2**31 - 1],
    "uint32": [0, 1, 2, 3, 5, 7, 11, 27, 0b11001, 2**31, 2**32 - 1],
    "float32": [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -1e-3, -0.7, -100.0],
    "float64": [np.nan, np.inf, -np.inf, 0.0, -0.0, -0.1, 1e-50, 1e39, 1e-45, 3.4028235e38, 3.5e38, 1e-5, 1e16],
}


@pytest.mark.spec("EN.2.2")
@given(op=st.sampled_from(OPS), data=st.data())
def test_engine_and_contract_agree_on_mutated_files(op, data):
    """Valid op files with a few values changed (the cache's and q's values are never read by the checks):
    the engine refuses exactly what the contract refuses, with the contract's first message."""
    tensors = VALID_INPUTS[op]()
    names = sorted(k for k, a in tensors.items() if a.dtype.name in _MUTANTS and k not in ("q", "kv_cache"))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        a = tensors[data.draw(st.sampled_from(names), label="tensor")]
        i = data.draw(st.integers(0, a.size - 1), label="index")
        a.reshape(-1)[i] = data.draw(st.sampled_from(_MUTANTS[a.dtype.name]), label="value")
    assert _engine_says(op, tensors) == _contract_says(op, tensors)


@pytest.mark.spec("EN.2.2")
@given(
    scale=st.one_of(
        st.floats(),
        st.floats(max_value=0.0),
        st.floats(min_value=3e38),
        st.floats(min_value=0.0, max_value=1e-44),
        st.sampled_from([1e-4, 1e-5, 1e15, 1e16, 123456789012345678.0, 5e-324, -1.5e300, -0.0001]),
    )
)
def test_engine_softmax_scale_messages_are_the_contracts(scale):
    """softmax_scale's float32 rules, and its value written as Python's repr writes it."""
    tensors = {**VALID_INPUTS["tree_verify"](), "softmax_scale": np.array(scale, np.float64)}
    assert _engine_says("tree_verify", tensors) == _contract_says("tree_verify", tensors)


@pytest.mark.spec("EN.2.3")
def test_serve_keeps_serving_after_bad_requests(exe, tmp_path):
    good = tmp_path / "good.kdtr"
    good.write_bytes(kdtr.dumps(build_inputs()))
    bad = tmp_path / "bad.kdtr"
    bad.write_bytes(kdtr.dumps({**build_inputs(), "budget": np.array(5000, np.int32)}))
    garbage = tmp_path / "garbage.kdtr"
    garbage.write_bytes(os.urandom(300))
    requests = [
        f"tree_build\t{good}\t{tmp_path / 'o1.kdtr'}",
        "tree_build only-two-fields",
        f"tree_build\t{bad}\t{tmp_path / 'o2.kdtr'}",
        "# a comment gets no answer",
        "",
        f"tree_build\t{garbage}\t{tmp_path / 'o3.kdtr'}",
        f"tree_fell\t{good}\t{tmp_path / 'o4.kdtr'}",
        f"tree_build\t{tmp_path / 'missing.kdtr'}\t{tmp_path / 'o5.kdtr'}",
        f"tree_build {good} {tmp_path / 'o6.kdtr'}",
    ]
    out = cli(exe, "serve", stdin="\n".join(requests) + "\n")
    assert out.returncode == 0, out.stderr
    answers = out.stdout.splitlines()
    assert len(answers) == 7, answers
    assert answers[0].startswith("ok\t") and answers[6].startswith("ok\t")
    assert answers[1].startswith("error\trequest: expected 'OP<TAB>IN<TAB>OUT'")
    assert answers[2] == "error\tbudget: 5000 is outside 0..1024"
    assert answers[3].startswith(f"error\t{garbage}: not a valid KDTR file")
    assert answers[4].startswith("error\top: 'tree_fell' is not one of")
    assert answers[5].startswith(f"error\t{tmp_path / 'missing.kdtr'}: not a valid KDTR file: E90")
    assert (tmp_path / "o1.kdtr").is_file() and (tmp_path / "o6.kdtr").is_file()
    assert not any((tmp_path / f"o{i}.kdtr").exists() for i in (2, 3, 4, 5))
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(requests[:3]) + "\n")
    batch = cli(exe, "batch", listing)
    assert batch.returncode == 1 and len(batch.stdout.splitlines()) == 3


# --- EN.2.4 libFuzzer smoke run ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.spec("EN.2.4")
def test_op_path_libfuzzer_smoke(request, tmp_path):
    """libFuzzer + ASan/UBSan over the op input path, seeded with valid op files; any crash fails."""
    fuzz = tools.required_binary(request.config, "kdtree-engine-fuzz")
    seconds = profiles.fuzz_seconds()
    seeds = tmp_path / "corpus"
    seeds.mkdir()
    for name, data in example_op_files().items():
        (seeds / name).write_bytes(data)
    out = subprocess.run(
        [
            str(fuzz),
            str(seeds),
            f"-max_total_time={seconds}",
            "-use_value_profile=1",
            f"-dict={ROOT / 'engine' / 'fuzz' / 'op.dict'}",
            "-max_len=32768",
            f"-artifact_prefix={tmp_path}/",
            "-print_final_stats=1",
            *tools.fuzz_memory_flags(),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )
    stats = [
        ln for ln in out.stderr.splitlines() if ln.startswith(("stat::number_of_executed_units", "stat::peak_rss"))
    ]
    request.node.user_properties.append(("fuzz", {"seconds": seconds, "stats": stats}))
    print("\n".join(stats))
    assert out.returncode == 0, out.stderr[-4000:]


# --- EN.3 C ABI -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kdtree_cpu_lib(request):
    return kdtree_cpu.KdtreeCpu(tools.required_library(request.config, "kdtree_cpu"))


@pytest.mark.spec("EN.3.1")
@given(case=hh.topk_inputs(max_bs=6, max_L=6, max_K=8, max_B=80), threads=st.sampled_from([1, 2, 4]))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_c_abi_tree_build_equals_reference(kdtree_cpu_lib, case, threads):
    lib = kdtree_cpu_lib
    lp, ids, roots, B, prefix = (case.args[k] for k in ("top_logp", "top_ids", "root_tokens", "budget", "prefix_lens"))
    want = ref_build.tree_build(lp, ids, roots, B, prefix, with_full_mask=True)
    got = lib.tree_build(lp, ids, roots, B, prefix, with_full_mask=True, threads=threads)
    for f in contract.Tree.FIELDS:
        assert_bit_exact(getattr(got, f), getattr(want, f), what=f, spec_id="EN.3.1")
    again = lib.tree_build(lp, ids, roots, B, prefix, threads=threads, validate=False, out=lib.outputs(len(roots), B))
    assert again.full_mask.shape == (0,)
    for f in contract.Tree.FIELDS[:-1]:
        assert_bit_exact(getattr(again, f), getattr(want, f), what=f, spec_id="EN.3.1")


@pytest.mark.spec("EN.3.1")
def test_c_abi_rejects_bad_input(kdtree_cpu_lib):
    lib = kdtree_cpu_lib
    t = build_inputs()
    args = [t["top_logp"], t["top_ids"], t["root_tokens"], 6, t["prefix_lens"]]
    assert lib.version.startswith("kdtree-cpu")
    bad = t["top_logp"].copy()
    bad[1, 1, 2] = np.nan
    with pytest.raises(kdtree_cpu.KdtreeCpuError, match=r"^top_logp: NaN at \(1, 1, 2\)"):
        lib.tree_build(bad, *args[1:])
    with pytest.raises(kdtree_cpu.KdtreeCpuError, match=r"^budget: 1025 is outside 0..1024"):
        lib.tree_build(*args[:3], 1025, args[4])
    with pytest.raises(kdtree_cpu.KdtreeCpuError, match=r"^top_ids: dtype int64, expected int32"):
        lib.tree_build(args[0], args[1].astype(np.int64), *args[2:])
    with pytest.raises(kdtree_cpu.KdtreeCpuError, match=r"^out.parents: "):
        lib.tree_build(*args, out=lib.outputs(2, 5))
