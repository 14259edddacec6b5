// cuda/emu/tests/test_emu_kernels.cu: kernels run on the CPU emulator: indexing, shared memory and
// barriers, warp shuffles and votes, atomics, dynamic shared memory.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "cuda/compat.h"
#include "cuda/emu/tests/util.h"

namespace {

__global__ void vec_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void fill_2d(int* out, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = y * 1000 + x;
}

template <int kThreads>
__global__ void block_reduce(const double* x, double* out, int n) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += kThreads * gridDim.x) acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void warp_ops(const float* x, float* sum_down, float* sum_xor, int* scan_up, float* bcast, unsigned* ballot,
                         int* any_all) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  float v = x[threadIdx.x];
  float d = v;
  for (int off = 16; off > 0; off /= 2) d += __shfl_down_sync(0xffffffffu, d, off);
  float r = v;
  for (int m = 16; m > 0; m /= 2) r += __shfl_xor_sync(0xffffffffu, r, m);
  int s = lane;  // inclusive prefix sum of lane ids
  for (int off = 1; off < 32; off *= 2) {
    const int o = __shfl_up_sync(0xffffffffu, s, off);
    if (lane >= off) s += o;
  }
  const float b = __shfl_sync(0xffffffffu, v, 5);
  const unsigned bal = __ballot_sync(0xffffffffu, lane % 3 == 0);
  const int any = __any_sync(0xffffffffu, lane == 7);
  const int all = __all_sync(0xffffffffu, lane < 32);
  const int none = __any_sync(0xffffffffu, lane > 40);
  if (lane == 0) {
    sum_down[warp] = d;
    ballot[warp] = bal;
    any_all[warp] = any * 100 + all * 10 + none;
  }
  sum_xor[threadIdx.x] = r;
  scan_up[threadIdx.x] = s;
  bcast[threadIdx.x] = b;
}

__global__ void histogram(const int* x, int n, float* hf, double* hd, unsigned long long* hu) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(&hf[x[i]], 1.0f);
    atomicAdd(&hd[x[i]], 0.5);
    atomicAdd(&hu[x[i]], 1ull);
  }
}

__device__ float atomic_max_float(float* addr, float value) {  // the classic CAS loop
  int* p = reinterpret_cast<int*>(addr);
  int old = *p;
  while (__int_as_float(old) < value) {
    const int assumed = old;
    old = atomicCAS(p, assumed, __float_as_int(value));
    if (old == assumed) break;
  }
  return __int_as_float(old);
}

__global__ void max_kernel(const float* x, int n, float* fmax_out, int* imax_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomic_max_float(fmax_out, x[i]);
    atomicMax(imax_out, static_cast<int>(x[i] * 10));
  }
}

__global__ void dyn_shared_reverse(const float* x, float* y, int n) {
  GS_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  if (t < n) s[t] = x[t];
  __syncthreads();
  if (t < n) y[t] = s[n - 1 - t];
}

}  // namespace

TEST_CASE("emu: vector add over several blocks, partial last block") {
  const int n = 1000;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i), b[i] = 2.0f * static_cast<float>(i);
  DevBuf<float> da(a), db(b), dc(n);
  REQUIRE(gs::cuda::launch(vec_add, dim3((n + 127) / 128), dim3(128), 0, nullptr, da.p, db.p, dc.p, n) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto c = dc.get();
  for (int i = 0; i < n; ++i) REQUIRE(c[i] == 3.0f * static_cast<float>(i));
}

TEST_CASE("emu: 2-D grid and block indexing") {
  const int w = 37, h = 21;
  DevBuf<int> d(w * h);
  GS_CUDA_CHECK(gs::cuda::launch(fill_2d, dim3(3, 3), dim3(16, 8), 0, nullptr, d.p, w, h));
  const auto o = d.get();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) REQUIRE(o[y * w + x] == y * 1000 + x);
}

TEST_CASE("emu: block reduction with __shared__ and __syncthreads, every schedule") {
  const int n = 5000;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(i * 0.1);
  const double ref = std::accumulate(x.begin(), x.end(), 0.0);
  DevBuf<double> dx(x), dout(8);
  for (int seed = 0; seed < 3; ++seed) {
    gs_emu::set_schedule(seed == 0 ? gs_emu::Schedule::InOrder : gs_emu::Schedule::Random, seed);
    GS_CUDA_CHECK(gs::cuda::launch(block_reduce<256>, dim3(8), dim3(256), 0, nullptr, dx.p, dout.p, n));
    const auto parts = dout.get();
    CHECK(std::accumulate(parts.begin(), parts.end(), 0.0) == doctest::Approx(ref).epsilon(1e-12));
  }
  gs_emu::set_schedule(gs_emu::Schedule::Random, 1);
}

TEST_CASE("emu: warp shuffles (down, xor, up, broadcast) and votes") {
  const int threads = 64;
  std::vector<float> x(threads);
  for (int i = 0; i < threads; ++i) x[i] = static_cast<float>(i);
  DevBuf<float> dx(x), dsum(2), dxor(threads), dbc(threads);
  DevBuf<int> dscan(threads), dany(2);
  DevBuf<unsigned> dbal(2);
  GS_CUDA_CHECK(gs::cuda::launch(warp_ops, dim3(1), dim3(threads), 0, nullptr, dx.p, dsum.p, dxor.p, dscan.p, dbc.p,
                                 dbal.p, dany.p));
  const auto sum = dsum.get(), xr = dxor.get(), bc = dbc.get();
  const auto scan = dscan.get(), any = dany.get();
  const auto bal = dbal.get();
  for (int w = 0; w < 2; ++w) {
    const float ref = static_cast<float>(32 * 31 / 2 + 32 * 32 * w);
    CHECK(sum[w] == ref);
    CHECK(bal[w] == 0x49249249u);  // lanes 0, 3, 6, ...
    CHECK(any[w] == 110);
    for (int l = 0; l < 32; ++l) {
      CHECK(xr[w * 32 + l] == ref);
      CHECK(scan[w * 32 + l] == l * (l + 1) / 2);
      CHECK(bc[w * 32 + l] == static_cast<float>(w * 32 + 5));
    }
  }
}

TEST_CASE("emu: atomics: float/double/u64 atomicAdd histogram, atomicMax and a CAS loop") {
  const int n = 3000, bins = 7;
  std::vector<int> x(n);
  std::vector<float> ref(bins, 0.0f);
  for (int i = 0; i < n; ++i) x[i] = (i * 13) % bins, ref[x[i]] += 1.0f;
  DevBuf<int> dx(x);
  DevBuf<float> hf(bins);
  DevBuf<double> hd(bins);
  DevBuf<unsigned long long> hu(bins);
  GS_CUDA_CHECK(cudaMemset(hf.p, 0, bins * sizeof(float)));
  GS_CUDA_CHECK(cudaMemset(hd.p, 0, bins * sizeof(double)));
  GS_CUDA_CHECK(cudaMemset(hu.p, 0, bins * sizeof(unsigned long long)));
  GS_CUDA_CHECK(gs::cuda::launch(histogram, dim3((n + 255) / 256), dim3(256), 0, nullptr, dx.p, n, hf.p, hd.p, hu.p));
  const auto f = hf.get();
  const auto d = hd.get();
  const auto u = hu.get();
  for (int b = 0; b < bins; ++b) {
    CHECK(f[b] == ref[b]);
    CHECK(d[b] == 0.5 * ref[b]);
    CHECK(u[b] == static_cast<unsigned long long>(ref[b]));
  }

  std::vector<float> v(500);
  for (int i = 0; i < 500; ++i) v[i] = static_cast<float>((i * 37) % 499) * 0.5f;
  DevBuf<float> dv(v), fmax(std::vector<float>{-1e30f});
  DevBuf<int> imax(std::vector<int>{-1});
  GS_CUDA_CHECK(gs::cuda::launch(max_kernel, dim3(4), dim3(128), 0, nullptr, dv.p, 500, fmax.p, imax.p));
  CHECK(fmax.get()[0] == 249.0f);
  CHECK(imax.get()[0] == 2490);
}

TEST_CASE("emu: dynamic shared memory and the 48 KiB opt-in rule") {
  const int n = 256;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 0.0f);
  DevBuf<float> dx(x), dy(n);
  GS_CUDA_CHECK(gs::cuda::launch(dyn_shared_reverse, dim3(1), dim3(n), n * sizeof(float), nullptr, dx.p, dy.p, n));
  const auto y = dy.get();
  for (int i = 0; i < n; ++i) REQUIRE(y[i] == static_cast<float>(n - 1 - i));

  const size_t big = 64 * 1024;
  CHECK(gs::cuda::launch(dyn_shared_reverse, dim3(1), dim3(n), big, nullptr, dx.p, dy.p, n) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);  // launch-configuration errors are not sticky
  CHECK(cudaFuncSetAttribute(dyn_shared_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
        cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE(cudaFuncSetAttribute(dyn_shared_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(big)) == cudaSuccess);
  CHECK(gs::cuda::launch(dyn_shared_reverse, dim3(1), dim3(n), big, nullptr, dx.p, dy.p, n) == cudaSuccess);
  CHECK(gs::cuda::launch(dyn_shared_reverse, dim3(1), dim3(n), big + 4, nullptr, dx.p, dy.p, n) ==
        cudaErrorInvalidValue);
  cudaGetLastError();
}
