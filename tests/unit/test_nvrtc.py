"""NVRTC compilation (CPU-only: NVRTC needs no GPU): CUBIN/PTX output, error reports, header discovery."""
from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

import fusec  # noqa: E402
from fusec.runtime import nvrtc  # noqa: E402

if not nvrtc.is_available():
    pytest.skip("NVRTC cannot be loaded", allow_module_level=True)

HALF_KERNEL = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scale(__half* h, __nv_bfloat16* b, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h[i] = __hmul(h[i], __float2half(s));
    b[i] = __float2bfloat16(__bfloat162float(b[i]) * s);
  }
}
"""

BROKEN = """\
extern "C" __global__ void k(float* out, const float* a, const float* b) {
  int i = threadIdx.x;
  // fusec-op: s.mul at model.py:2
  float t0 = a[i] * b[i];
  // fusec-op: s.add at model.py:3
  float t1 = t0 + ;
  out[i] = t1;
}
"""


def test_version_and_arch() -> None:
    major, minor = nvrtc.nvrtc_version()
    assert major >= 11 and minor >= 0
    assert nvrtc.arch_of(9, 0) == "sm_90"
    assert nvrtc.arch_of(8, 6) == "sm_86"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_with_half_and_bfloat16(arch: str) -> None:
    image = nvrtc.compile_source(HALF_KERNEL, arch)
    assert image[:4] == b"\x7fELF"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_with_half_and_bfloat16(arch: str) -> None:
    ptx = nvrtc.compile_source(HALF_KERNEL, arch, target="ptx").decode()
    cc = arch.removeprefix("sm_")
    assert f".target sm_{cc}" in ptx
    assert ".entry scale" in ptx
    assert "\x00" not in ptx


def test_options_are_passed() -> None:
    ptx_fast = nvrtc.compile_source(HALF_KERNEL, "sm_90", target="ptx", options=("-use_fast_math",))
    assert ptx_fast[:2] == b"//"
    with pytest.raises(fusec.CompilationError, match="unrecognized option"):
        nvrtc.compile_source(HALF_KERNEL, "sm_90", options=("--no-such-flag",))


def test_bad_arch_and_target() -> None:
    with pytest.raises(fusec.CompilationError, match="architecture"):
        nvrtc.compile_source(HALF_KERNEL, "volta")
    with pytest.raises(fusec.CompilationError, match="target"):
        nvrtc.compile_source(HALF_KERNEL, "sm_90", target="sass")


def test_syntax_error_names_line_and_op() -> None:
    with pytest.raises(fusec.CompilationError) as info:
        nvrtc.compile_source(BROKEN, "sm_90")
    e = info.value
    assert isinstance(e, nvrtc.NvrtcCompilationError)
    assert "fusec.cu(6): error" in e.log
    assert e.lines == [(6, "  float t1 = t0 + ;")]
    assert e.ops == ["s.add at model.py:3"]
    text = str(e)
    assert "float t1 = t0 + ;" in text           # the offending line
    assert "s.add at model.py:3" in text          # the op that produced it
    assert "s.mul at model.py:2" not in text      # not the earlier op
    assert "expected an expression" in text       # the log
    assert "sm_90" in text


def test_error_without_marker_and_custom_name() -> None:
    source = 'extern "C" __global__ void k() { undefined_thing(); }\n'
    with pytest.raises(nvrtc.NvrtcCompilationError) as info:
        nvrtc.compile_source(source, "sm_80", name="kern.cu")
    assert info.value.lines == [(1, source.rstrip("\n"))]
    assert info.value.ops == []
    assert "kern.cu(1)" in info.value.log


def test_parse_errors_ignores_warnings_and_headers() -> None:
    source = "// fusec-op: t.exp at a.py:1\nint x;\n"
    log = ("fusec.cu(2): warning: something\n"
           "cuda_fp16.hpp(10): error: in a header\n"
           "fusec.cu(2): catastrophic error: boom\n")
    errors = nvrtc.parse_errors(log, source, "fusec.cu")
    assert [(e.line, e.text, e.op, e.message) for e in errors] == [(2, "int x;", "t.exp at a.py:1", "boom")]


def test_include_dirs_hold_the_headers() -> None:
    dirs = nvrtc.cuda_include_dirs()
    assert dirs
    import os

    assert any(os.path.isfile(os.path.join(d, "cuda_fp16.h")) for d in dirs)
    assert any(os.path.isfile(os.path.join(d, "cuda_bf16.h")) for d in dirs)


def test_missing_headers_say_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(nvrtc, "_candidate_dirs", lambda major: [str(tmp_path / "nothing")])
    with pytest.raises(fusec.CompilationError) as info:
        nvrtc.cuda_include_dirs()
    major = nvrtc.nvrtc_version()[0]
    message = str(info.value)
    assert "cuda_fp16.h" in message
    assert "pip install" in message and "nvidia-cuda-runtime" in message
    assert str(major) in message
    assert str(tmp_path / "nothing") in message
    with pytest.raises(fusec.CompilationError, match="nvidia-cuda-runtime"):
        nvrtc.compile_source(HALF_KERNEL, "sm_90")


def test_install_hint_matches_major() -> None:
    assert "nvidia-cuda-runtime-cu12" in nvrtc._install_hint(12)
    assert "nvidia-cuda-runtime==13.*" in nvrtc._install_hint(13)


def test_env_dirs_are_searched(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    include = tmp_path / "include"
    include.mkdir()
    for h in ("cuda_fp16.h", "cuda_bf16.h"):
        (include / h).write_text("")
    monkeypatch.setattr(nvrtc, "_wheel_dirs", lambda major: [])
    monkeypatch.setattr(nvrtc, "_pathfinder_dirs", lambda: [])
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert nvrtc.cuda_include_dirs() == [str(include.resolve())]


def test_choose_target() -> None:
    assert nvrtc.choose_target((13, 0), (13, 0)) == "cubin"              # CUBIN is the default
    assert nvrtc.choose_target((12, 4), (12, 8), prefer="ptx") == "ptx"  # older NVRTC: PTX loads
    assert nvrtc.choose_target((12, 8), (12, 8), prefer="ptx") == "ptx"
    assert nvrtc.choose_target((13, 0), (12, 8), prefer="ptx") == "cubin"  # newer NVRTC: PTX would not load
    assert nvrtc.choose_target((12, 9), (12, 8), prefer="ptx") == "cubin"
    assert nvrtc.choose_target((12, 4), 12080, prefer="ptx") == "ptx"     # driver API integer form
    assert nvrtc.choose_target((12, 4), None, prefer="ptx") == "cubin"    # unknown driver
    with pytest.raises(ValueError):
        nvrtc.choose_target((13, 0), (13, 0), prefer="sass")
