#!/usr/bin/env python3
"""Breaks CUDA kernels on purpose and checks that the emulator's test suite catches each break.

    scripts/mutation_test.py BUILD_DIR [--only NAME] [--list] [--json]

Each mutation is one classic kernel bug (a barrier removed, `i < n` made `i <= n`, an atomicAdd
made a plain `+=`) applied to a copy of one source file. The objects built from that file (and,
for a header, the objects that use the mutated function) are recompiled with the build's own
commands into a scratch folder, the test program is relinked with them placed first, and the
test is run: the mutation counts as caught when the test fails and its output holds the expected
finding (the memcheck or racecheck report). The build folder itself is never modified.

Needs a configured and built emulator build (Boost.Context, GCC, the default
GRADSLEUTH_EMU_CHECKS=ON) with Ninja. Exit status: 0 when every mutation is caught, 1 when one
is not, 2 when the build cannot run the test (then nothing was checked), 77 when the emulator
or its checks are not in this build.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, file, old text, new text, objects to recompile besides the file's own (a token their
# source must contain, for headers), ninja target of the test program, its arguments, the text
# its output must hold. Where the catching test case (or lab task) is known, the arguments run it
# alone: the program proves the same in seconds instead of running its other cases first (a
# renamed case matches nothing, the program passes, and the mutation is reported as not caught).
MUTATIONS = [
    dict(name="reduce_tree_sync", file="cuda/reduce.cu",
         old="      if (threadIdx.x < s) buf[threadIdx.x] = combine<A>(op, buf[threadIdx.x], buf[threadIdx.x + s]);\n"
             "      __syncthreads();\n",
         new="      if (threadIdx.x < s) buf[threadIdx.x] = combine<A>(op, buf[threadIdx.x], buf[threadIdx.x + s]);\n",
         what="__syncthreads() removed in the reduction tree",
         target="tests/test_cuda_backend_emu", args=["-aa=1"], expect="racecheck:"),
    dict(name="softmax_max_sync", file="cuda/softmax.cu",
         old="    mbuf[threadIdx.x] = m;\n    __syncthreads();\n",
         new="    mbuf[threadIdx.x] = m;\n",
         what="__syncthreads() removed after softmax's per-thread row max",
         target="tests/test_cuda_backend_emu", args=["-aa=1"], expect="racecheck:"),
    dict(name="arange_le", file="cuda/elementwise.cu",
         old="for (GS_GRID_STRIDE(i, n)) o[i] = convert<T>(start",
         new="for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i <= n; "
             "i += static_cast<int64_t>(gridDim.x) * blockDim.x) o[i] = convert<T>(start",
         what="arange's bound i < n made i <= n (one element past the end)",
         target="tests/test_cuda_backend_emu", args=["-aa=1"], expect="memcheck:"),
    dict(name="atomic_add_plain", file="cuda/kernel_utils.h",
         old="  } else {\n    atomicAdd(p, v);\n  }\n",
         new="  } else {\n    *p += v;\n  }\n",
         users="atomic_add(",
         what="the backend's atomic_add made a plain += (scatter_add, index_add, embedding backward)",
         target="tests/test_cuda_backend_emu", args=["-aa=1"], expect="racecheck:"),
    # The float16/bfloat16 kernels: each bug below is caught by the 16-bit comparison with the cpu
    # (or by memcheck, when the bug writes float32 values into 16-bit elements).
    dict(name="half_accumulate_in_place", file="cuda/kernel_utils.h",
         old="  if (!is_reduced_float(out.dtype)) {\n    f(out);",
         new="  if (true) {\n    f(out);",
         users="accumulate_in_float32(",
         what="a 16-bit scatter_add/index_add/col2im/pool backward given its 16-bit output instead of the float32 copy",
         target="tests/test_cuda_backend_emu", args=["-aa=1", "-tc=float16/bfloat16 on cuda: every*"],
         expect="memcheck:"),
    dict(name="half_scalar_read_as_half", file="cuda/elementwise.cu",
         old="          map2<T, T, float>(binary_op_name(op), out, a, b, BinaryF<T>{op});",
         new="          map2<T, T, T>(binary_op_name(op), out, a, b, BinaryF<T>{op});",
         what="the float32 number beside a 16-bit tensor (x * 2.0) read as a 16-bit value",
         target="tests/test_cuda_backend_emu", args=["-aa=1", "-tc=float16/bfloat16 on cuda: every*"],
         expect="TEST CASE:  float16/bfloat16 on cuda: every"),
    dict(name="half_softmax_no_max", file="cuda/softmax.cu",
         old="        yr[c] = narrow<S>(static_cast<T>(exp(widen(xr[c]) - m)) / sum);",
         new="        yr[c] = narrow<S>(static_cast<T>(exp(widen(xr[c]))) / sum);",
         what="the 16-bit softmax's last pass without the row max subtracted",
         target="tests/test_cuda_backend_emu", args=["-aa=1", "-tc=float16/bfloat16 on cuda: every*"],
         expect="TEST CASE:  float16/bfloat16 on cuda: every"),
    dict(name="half_gemm_compute_16f", file="cuda/linalg.cu",
         old="ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),",
         new="ldc, sC, batch, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT),",
         what="the 16-bit matmul asks cuBLAS for 16-bit accumulation (CUBLAS_COMPUTE_16F)",
         target="tests/test_cuda_backend_emu", args=["-aa=1", "-tc=float16/bfloat16 on cuda: float32 accumulation*"],
         expect="TEST CASE:  float16/bfloat16 on cuda: float32 accumulation"),
    dict(name="workbench_gelu_le", file="cuda/workbench/gelu.cu",
         old="  if (i < n) y[i] = gelu(x[i]);",
         new="  if (i <= n) y[i] = gelu(x[i]);",
         what="the workbench GELU v1 bound i < n made i <= n",
         target="tests/test_workbench_emu", args=["-aa=1", "-tc=workbench: gelu v1*"], expect="memcheck:"),
    dict(name="workbench_reduce_plain", file="cuda/workbench/reduce.cu",
         old="  if (t == 0) atomicAdd(out, s[0]);",
         new="  if (t == 0) *out += s[0];",
         what="the workbench reduce v2's atomicAdd made a plain += across blocks",
         target="tests/test_workbench_emu", args=["-aa=1", "-tc=workbench: reduce v2*"], expect="racecheck:"),
    dict(name="matmul_grid_short", file="cuda/linalg.cu",
         old="const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile),",
         new="const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile - 1),",
         what="the backend's tiled matmul launched with a grid one tile short along the columns",
         target="tests/test_cuda_backend_emu", args=["-aa=1", "-tc=matmul of int64*"], expect="TEST CASE:  matmul of int64"),
    dict(name="workbench_reduce_grid_short", file="cuda/workbench/reduce.cu",
         old="return gs::cuda::launch(reduce_v2, dim3(ceil_div(n, 2 * kV2Threads)),",
         new="return gs::cuda::launch(reduce_v2, dim3(ceil_div(n, 2 * kV2Threads) - 1),",
         what="the workbench reduce v2 launched with a grid one block short",
         target="tests/test_workbench_emu", args=["-aa=1", "-tc=workbench: reduce v2*"],
         expect="TEST CASE:  workbench: reduce v2"),
    dict(name="lab9_axpy_le", file="tutorials/lab9_cuda/solution/lab9_kernels.cu",
         old="  if (i < n) out[i] = alpha * x[i] + y[i];",
         new="  if (i <= n) out[i] = alpha * x[i] + y[i];",
         what="lab 9's axpy solution bound i < n made i <= n",
         target="tutorials/lab9_grader_solution", args=["check", "9", "--task", "5", "--expect", "full"],
         expect="the kernel wrote outside the buffer"),
]


def ninja_commands(build, target):
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", target], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ninja -t commands {target}: {out.stderr.strip()}")
    return out.stdout.splitlines()


def ninja_deps(build):
    """object -> list of the files it was compiled from (sources and headers)."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True).stdout
    deps, cur = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            cur = line.split(":")[0]
            deps[cur] = []
        elif cur and line.strip():
            deps[cur].append(line.strip())
    return deps


def compile_cmd_for(cmds, obj):
    for c in cmds:
        if f" -o {obj} " in c + " " and " -c " in c:
            return c
    return None


def run_mutation(m, build, scratch, deps, log):
    src = os.path.join(ROOT, m["file"])
    text = open(src).read()
    if m["old"] not in text:
        return dict(caught=False, error=f"the text to mutate is no longer in {m['file']}: update scripts/mutation_test.py")
    mroot = os.path.join(scratch, m["name"], "src")
    dst = os.path.join(mroot, m["file"])
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w") as f:
        f.write(text.replace(m["old"], m["new"], 1))
    cmds = ninja_commands(build, m["target"])
    # The objects of this target compiled from the file (through their wrapper), or using the header.
    objs = []
    for obj, files in deps.items():
        if not compile_cmd_for(cmds, obj):
            continue
        if any(os.path.realpath(f if os.path.isabs(f) else os.path.join(build, f)) == src for f in files):
            if m["file"].endswith(".h"):
                wrapper_src = [f for f in files if f.endswith(".cu")]
                if not any(m.get("users", "") in open(f if os.path.isabs(f) else os.path.join(build, f)).read()
                           for f in wrapper_src):
                    continue
            objs.append(obj)
    if not objs:
        return dict(caught=False, error=f"no object of {m['target']} is compiled from {m['file']}")
    new_objs = []
    for i, obj in enumerate(objs):
        cmd = compile_cmd_for(cmds, obj)
        args = shlex.split(cmd)
        k = args.index("-c")
        orig = args[k + 1]
        orig_abs = orig if os.path.isabs(orig) else os.path.join(build, orig)
        body = open(orig_abs).read()
        wrapper = os.path.join(scratch, m["name"], f"wrapper{i}.cpp")
        if m["file"].endswith(".h"):
            with open(wrapper, "w") as f:
                f.write(body)
        else:
            with open(wrapper, "w") as f:
                f.write(body.replace(src, dst))
        out_obj = os.path.join(scratch, m["name"], f"obj{i}.o")
        new = []
        skip = 0
        for j, a in enumerate(args):
            if skip:
                skip -= 1
                continue
            if a in ("-MT", "-MF"):
                skip = 1
                continue
            if a == "-MD":
                continue
            if a == "-o":
                new += ["-o", out_obj]
                skip = 1
                continue
            if j == k + 1:
                new.append(wrapper)
                continue
            new.append(a)
        first_i = next(j for j, a in enumerate(new) if a.startswith("-I"))
        new.insert(first_i, "-I" + mroot)  # the mutated header shadows the original
        new.insert(first_i, "-iquote" + os.path.dirname(src))  # "file.h" next to the original
        r = subprocess.run(new, cwd=build, capture_output=True, text=True)
        if r.returncode != 0:
            return dict(caught=False, error=f"the mutated {m['file']} did not compile:\n{r.stderr[-2000:]}")
        new_objs.append(out_obj)
    link = next((c for c in cmds if f" -o {m['target']} " in c + " " and " -c " not in c), None)
    if not link:
        return dict(caught=False, error=f"no link command for {m['target']}")
    exe = os.path.join(scratch, m["name"], os.path.basename(m["target"]))
    link = link.replace(f" -o {m['target']} ", f" -o {exe} ", 1)
    # The mutated objects take the place of the originals: right before the archive that holds
    # them (they then replace its members of the same name), or first when the originals are
    # linked as objects. Everything linked before that place keeps its precedence, so inline
    # functions (std::string's, say) still come from the same, uninstrumented objects as in the
    # real link.
    at = None
    members = {os.path.basename(o) for o in objs}
    for lib in re.finditer(r" (\S+\.a)(?= )", link):
        path = lib.group(1) if os.path.isabs(lib.group(1)) else os.path.join(build, lib.group(1))
        listed = subprocess.run(["ar", "t", path], capture_output=True, text=True).stdout.split()
        if members & set(listed):
            at = lib.start()
            break
    if at is None:
        at = re.search(r" (\S+\.o) ", link).start()
    link = link[:at] + " " + " ".join(new_objs) + link[at:]
    r = subprocess.run(link, cwd=build, shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        return dict(caught=False, error=f"relinking {m['target']} failed:\n{r.stderr[-2000:]}")
    env = dict(os.environ, GS_EMU_CHECKS="memcheck,racecheck", OMP_NUM_THREADS="1")
    t0 = time.time()
    try:
        r = subprocess.run([exe] + m["args"], cwd=os.path.join(build, os.path.dirname(m["target"])), env=env,
                           capture_output=True, text=True, timeout=600)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() + (e.stderr or b"").decode(), 124
    with open(log, "a") as f:
        f.write(f"==== {m['name']}: exit {rc}\n{out[-6000:]}\n")
    finding = next((line.strip() for line in out.splitlines() if m["expect"] in line), "")
    return dict(caught=rc != 0 and bool(finding), exit=rc, finding=finding[:300], seconds=round(time.time() - t0, 1),
                objects=len(new_objs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--only", help="one mutation by name")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    a = ap.parse_args()
    if a.list:
        for m in MUTATIONS:
            print(f"{m['name']:24} {m['file']:46} {m['what']}")
        return 0
    build = os.path.abspath(a.build)
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.exists(os.path.join(build, "build.ninja")) or not os.path.exists(cache):
        print(f"mutation_test: {build} is not a configured Ninja build", file=sys.stderr)
        return 2
    if "GRADSLEUTH_EMU_CHECKS:BOOL=ON" not in open(cache).read() or not shutil.which("ninja"):
        print("mutation_test: this build has no emulator checks (GRADSLEUTH_EMU_CHECKS) or ninja is missing", file=sys.stderr)
        return 77
    todo = [m for m in MUTATIONS if not a.only or m["name"] == a.only]
    if not todo:
        print(f"mutation_test: no mutation named {a.only} (see --list)", file=sys.stderr)
        return 2
    deps = ninja_deps(build)
    scratch = tempfile.mkdtemp(prefix="gs_mutation_")
    log = os.path.join(scratch, "mutation_test.log")
    results = []
    missing = []
    for m in todo:
        if subprocess.run(["ninja", "-C", build, "-t", "query", m["target"]], capture_output=True).returncode != 0:
            missing.append(m["name"])
            print(f"mutation_test: {m['name']}: {m['target']} is not in this build (skipped)", file=sys.stderr)
            continue
        print(f"mutation_test: {m['name']}: {m['what']} ...", file=sys.stderr, flush=True)
        t0 = time.time()
        r = run_mutation(m, build, scratch, deps, log)
        r.update(name=m["name"], file=m["file"], what=m["what"], total_seconds=round(time.time() - t0, 1))
        results.append(r)
        verdict = "caught" if r["caught"] else "NOT CAUGHT"
        print(f"mutation_test: {m['name']}: {verdict} ({r['total_seconds']} s) {r.get('finding') or r.get('error', '')}",
              file=sys.stderr, flush=True)
    ok = all(r["caught"] for r in results) and results
    if a.json:
        print(json.dumps(dict(caught=sum(r["caught"] for r in results), total=len(results), skipped=missing,
                              results=results)))
    else:
        print(f"{sum(r['caught'] for r in results)}/{len(results)} mutations caught"
              + (f"; skipped (not built): {', '.join(missing)}" if missing else "")
              + ("" if ok else f"; the test output is in {log}"), flush=True)
    if ok:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
