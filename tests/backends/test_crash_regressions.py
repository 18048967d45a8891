"""Programs whose generated code once killed the process, each run in a child process.

A kernel that reads or writes outside its buffers, or that gcc miscompiles, ends the test process
with a signal rather than a failed assertion; these run in a subprocess so that such a crash is one
failed test that names the program, and the rest of the suite still runs. Each result is compared
with hand-written torch code and with the oracle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import compiled_helpers as H
import pytest
import torch

import tcjit

# The masked convolution of issue 29: with the default CPU options on an AVX-512 host, gcc 12
# expanded a register tile's row copy into an inline memcpy that raised the tile array's alignment,
# then dropped the stack realignment of the leaf kernel: an aligned store to a misaligned array
# (SIGSEGV). Sizes: the issue's, and the variants it names.
MCONV = """
def mconv(float(B, C, H, W) I, float(F, C, K, K) Wt, uint8(F, C) M) -> (O) {
    O(b, f, h, w) +=! (M(f, r_c) == 1) ? fmax(0.0, I(b, r_c, h + r_i, w + r_j)) * Wt(f, r_c, r_i, r_j) : 0.0
}
"""

_CHILD = textwrap.dedent(
    """
    import json, sys, torch, tcjit
    from tcjit import reference
    source, sizes, torch_expr = json.loads(sys.argv[1])
    B, C, H, W, F, K = (sizes[k] for k in "BCHWFK")
    torch.manual_seed(0)
    I, Wt = torch.randn(B, C, H, W), torch.randn(F, C, K, K)
    M = (torch.randn(F, C) > 0).to(torch.uint8)
    got = tcjit.define(source)(I, Wt, M)
    want = eval(torch_expr)
    oracle = reference.evaluate(source, None, I, Wt, M)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, oracle, rtol=1e-5, atol=1e-5)
    print("ok")
    """
)

MCONV_TORCH = "torch.nn.functional.conv2d(I.clamp_min(0), Wt * M[:, :, None, None].float())"


def run_isolated(source: str, sizes: dict[str, int], torch_expr: str, cache_dir: str) -> None:
    """Run ``source`` on random inputs of ``sizes`` in a child process; fail (with its output and
    the signal that ended it) unless it matched ``torch_expr`` and the oracle."""
    env = dict(os.environ, TCJIT_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([source, sizes, torch_expr])],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    ended = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"child process ended with {ended} on sizes {sizes}:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
    )


@pytest.mark.parametrize(
    "sizes",
    [
        dict(B=2, C=5, H=6, W=7, F=3, K=3),
        dict(B=1, C=5, H=6, W=7, F=3, K=3),
        dict(B=2, C=3, H=6, W=7, F=3, K=3),
        dict(B=2, C=5, H=6, W=7, F=1, K=3),
        dict(B=2, C=5, H=6, W=6, F=3, K=3),
    ],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()),
)
def test_masked_convolution_runs_with_the_default_options(sizes, tmp_path) -> None:
    run_isolated(MCONV, sizes, MCONV_TORCH, str(tmp_path))


def test_masked_convolution_kernels_keep_their_stack_realignment(tmp_path) -> None:
    """The same programs in this process, built and inspected rather than run: whether the crash
    shows depends on where the stack slot lands, the dropped realignment behind it does not."""
    g = torch.Generator().manual_seed(0)
    with H.private_cache(tmp_path), H.checking_stack_frames():
        k = tcjit.define(MCONV)
        for H_, W in ((6, 7), (5, 7), (7, 7), (6, 8)):
            I, Wt = torch.randn(2, 5, H_, W, generator=g), torch.randn(3, 5, 3, 3, generator=g)
            M = (torch.randn(3, 5, generator=g) > 0).to(torch.uint8)
            tcjit.compile(k, I, Wt, M)


# Found by the nest fuzzer with TCJIT_VECTOR_BYTES=32 on an AVX-512 host: a register tile of
# 32-byte lane rows (float tc_r0[3][3][8]), stored with 32-byte aligned moves through an index
# register, in a kernel whose stack realignment gcc dropped: it faulted whenever the caller's
# stack was not 32-byte aligned there, about one run in two. Fixed by declaring stack arrays
# aligned (TC_STACK_ALIGNED in the C prelude).
NEST = """
def nest(float(S0) X0) -> (O) {
    O(a, b) +=! X0(r_i) where a in 0:7, b in 0:13, r_i in 0:2, r_j in 0:3
}
"""

_NEST_CHILD = textwrap.dedent(
    """
    import sys, torch, tcjit
    from tcjit import reference
    X = torch.randn(2)
    got = tcjit.define(sys.argv[1])(X)
    torch.testing.assert_close(got, X.sum().expand(7, 13) * 3)
    torch.testing.assert_close(got, reference.evaluate(sys.argv[1], None, X))
    print("ok")
    """
)


@pytest.mark.parametrize("width", [16, 32, 64])
def test_lane_row_tiles_keep_their_stack_realignment(width, tmp_path) -> None:
    with (
        H.private_cache(tmp_path),
        H.checking_stack_frames(),
        H.environment("TCJIT_VECTOR_BYTES", str(width)),
    ):
        tcjit.compile(tcjit.define(NEST), torch.randn(2))


def test_lane_row_tiles_run_wherever_the_stack_lies(tmp_path) -> None:
    """Eight child processes whose stacks start at different offsets (environments of different
    lengths): before the fix, about half of them died."""
    for pad in range(8):
        env = dict(os.environ, TCJIT_CACHE_DIR=str(tmp_path), TCJIT_VECTOR_BYTES="32", TC_PAD="x" * (8 * pad))
        proc = subprocess.run(
            [sys.executable, "-c", _NEST_CHILD, NEST], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
            pad,
            proc.returncode,
            proc.stderr[-3000:],
        )


#: An OpenMP outlined function (default options, 16-byte vectors, found by the full tier's fuzzer):
#: a frame pointer, a stack argument pushed for a call, and the epilogue restoring the stack pointer
#: with `lea -0x28(%rbp),%rsp`. That `lea` is no stack slot: the check must not flag it.
EPILOGUE = """\
    1c20:	push   %rbp
    1c21:	mov    %rsp,%rbp
    1c24:	push   %r15
    1c2d:	sub    $0x38,%rsp
    1c7d:	jl     1dc0 <f+0x1a0>
    1ce0:	sub    $0x8,%rsp
    1ced:	push   %r15
    1cfe:	call   1150 <tc_entry_nest_region1>
    1d56:	lea    -0x28(%rbp),%rsp
    1d86:	vmovupd %ymm0,(%rax)
    1d63:	pop    %rbp
    1d64:	ret"""


#: A shrink-wrapped kernel (the nest fuzzer's ``O(a) +=! (M1(r_i) == 1 && M2(a) == 1) ? ...`` with
#: single_thread options and 16-byte vectors, full tier, 2026-11-28): an early exit before the
#: prologue, then `push %rbp` (the stack 16-byte aligned) and 16-byte slots in the red zone, all
#: aligned. The check took the first branch for the prologue's end and flagged it.
SHRINK_WRAPPED = """\
    1100:	cmpb   $0x1,(%rcx)
    1103:	je     1128 <tc_entry_nest+0x28>
    1109:	vmovdqu %ymm0,(%r9)
    1121:	ret
    1128:	push   %rbp
    1129:	vpxor  %xmm0,%xmm0,%xmm0
    112d:	mov    %rsp,%rbp
    1130:	vmovdqa %xmm0,-0x10(%rsp)
    1136:	cmpb   $0x1,(%r8)
    113a:	je     129d <tc_entry_nest+0x19d>
    1140:	mov    -0x10(%rsp),%eax
    1150:	vmovdqa %xmm0,-0x10(%rsp)
    1160:	leave
    1161:	ret"""


def test_the_frame_check_follows_a_prologue_after_an_early_exit() -> None:
    lines = SHRINK_WRAPPED.splitlines()
    assert not H._misaligned_slot_move(lines)
    # a 16-byte move to a slot 8 bytes off after that prologue is still flagged
    planted = [*lines[:8], "    1132:\tvmovdqa %xmm0,-0x8(%rsp)", *lines[8:]]
    assert H._misaligned_slot_move(planted)


def test_the_frame_check_flags_misaligned_slots_not_epilogues() -> None:
    lines = EPILOGUE.splitlines()
    assert not H._misaligned_slot_move(lines)
    # the same frame with a slot's address taken into a register and stored to, 32-byte aligned
    planted = [*lines[:4], "    1c30:\tlea    0x8(%rsp),%rax", "    1c34:\tvmovdqa %ymm0,(%rax)", *lines[4:]]
    assert H._misaligned_slot_move(planted)
    realigned = [*planted[:2], "    1c22:\tand    $0xffffffffffffffe0,%rsp", *planted[2:]]
    assert not H._misaligned_slot_move(realigned)
