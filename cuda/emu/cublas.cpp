// cuda/emu/cublas.cpp: the emulator's cuBLAS subset: argument checks as cuBLAS documents them, an
// extent check of every matrix against its device allocation, and a double-accumulating GEMM.
#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>

#include "cuda/emu/cublas_v2.h"
#include "cuda/emu/cuda_bf16.h"
#include "cuda/emu/cuda_fp16.h"
#include "cuda/emu/emu.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  *s = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_(unknown)";
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

namespace {

const char* op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : (op == CUBLAS_OP_T ? "T" : "C"); }

// Checks that matrix `name` (rows x cols as stored, leading dimension ld, batch stride) lies inside
// the device allocation containing its base pointer.
template <class T>
bool check_extent(const char* call, const char* name, const T* p, int rows, int cols, int ld, long long stride,
                  int batch, const std::string& how) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  gs_emu::Allocation a;
  if (!p || !gs_emu::find_allocation(p, &a) || !a.device) {
    std::fprintf(stderr,
                 "gs_emu: %s: %s = %p is not device memory; cuBLAS reads and writes matrices in cudaMalloc "
                 "memory (copy the data there first)\n",
                 call, name, static_cast<const void*>(p));
    return false;
  }
  const long long last =
      static_cast<long long>(cols - 1) * ld + (rows - 1) + static_cast<long long>(batch - 1) * std::max(stride, 0LL);
  const long long avail = static_cast<long long>(
      (reinterpret_cast<uintptr_t>(a.base) + a.size - reinterpret_cast<uintptr_t>(p)) / sizeof(T));
  if (last >= avail) {
    std::fprintf(stderr,
                 "gs_emu: %s: %s is read as %d x %d (column-major, %s, ld %d%s) and reaches element %lld, but its "
                 "allocation holds only %lld elements from %p. cuBLAS is column-major: a row-major matrix is its "
                 "transpose (swap the operands or the op, and pass the row length as ld).\n",
                 call, name, rows, cols, how.c_str(), ld,
                 batch > 1 ? (", stride " + std::to_string(stride) + ", batch " + std::to_string(batch)).c_str() : "",
                 last, avail, static_cast<const void*>(p));
    return false;
  }
  return true;
}

// An element as a double, and a double stored into an element (C's one rounding; for a 16-bit C
// through float32, the accumulator type of CUBLAS_COMPUTE_32F).
inline double to_double(float v) { return v; }
inline double to_double(double v) { return v; }
inline double to_double(__half v) { return __half2float(v); }
inline double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// C = alpha op(A) op(B) + beta C. T: A's and B's element type, TC: C's, S: alpha's and beta's.
// round_f32: the sum is rounded to float32 (a 32F compute type) before it is stored; acc16: every
// multiply-add is rounded to float16 (CUBLAS_COMPUTE_16F: a 16-bit accumulator).
template <class T, class TC = T, class S = T>
cublasStatus_t gemm(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const S* alpha, const T* A, int lda, long long sA, const T* B, int ldb, long long sB, const S* beta,
                    TC* C, int ldc, long long sC, int batch, bool round_f32 = false, bool acc16 = false) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto bad_op = [](cublasOperation_t op) { return op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C; };
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  std::string why;
  if (bad_op(ta) || bad_op(tb))
    why = "transa/transb must be CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C";
  else if (m < 0 || n < 0 || k < 0)
    why = "m, n and k must be >= 0";
  else if (lda < std::max(1, a_rows))
    why = "lda must be >= max(1, " + std::string(ta == CUBLAS_OP_N ? "m" : "k") + ")";
  else if (ldb < std::max(1, b_rows))
    why = "ldb must be >= max(1, " + std::string(tb == CUBLAS_OP_N ? "k" : "n") + ")";
  else if (ldc < std::max(1, m))
    why = "ldc must be >= max(1, m)";
  else if (batch < 0)
    why = "batchCount must be >= 0";
  else if (!alpha || !beta)
    why = "alpha and beta must not be null";
  if (!why.empty()) {
    std::fprintf(stderr, "gs_emu: %s(op%s, op%s, m=%d, n=%d, k=%d, lda=%d, ldb=%d, ldc=%d): %s\n", call, op_name(ta),
                 op_name(tb), m, n, k, lda, ldb, ldc, why.c_str());
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const bool use_ab = k > 0 && to_double(*alpha) != 0.0;
  const std::string how_a = std::string("op ") + op_name(ta) + ", m=" + std::to_string(m) + " k=" + std::to_string(k);
  const std::string how_b = std::string("op ") + op_name(tb) + ", k=" + std::to_string(k) + " n=" + std::to_string(n);
  if (use_ab && (!check_extent(call, "A", A, a_rows, a_cols, lda, sA, batch, how_a) ||
                 !check_extent(call, "B", B, b_rows, b_cols, ldb, sB, batch, how_b)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!check_extent(call, "C", static_cast<const TC*>(C), m, n, ldc, sC, batch,
                    "m=" + std::to_string(m) + " n=" + std::to_string(n)))
    return CUBLAS_STATUS_INVALID_VALUE;
  const double al = to_double(*alpha), be = to_double(*beta);
  auto half16 = [](double v) { return static_cast<double>(__half2float(__float2half_rn(static_cast<float>(v)))); };
  for (int b = 0; b < batch; ++b) {
    const T* Ab = A + static_cast<long long>(b) * sA;
    const T* Bb = B + static_cast<long long>(b) * sB;
    TC* Cb = C + static_cast<long long>(b) * sC;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double acc = 0.0;
        if (use_ab) {
          for (int p = 0; p < k; ++p) {
            const double a = to_double(ta == CUBLAS_OP_N ? Ab[i + static_cast<long long>(p) * lda]
                                                         : Ab[p + static_cast<long long>(i) * lda]);
            const double bv = to_double(tb == CUBLAS_OP_N ? Bb[p + static_cast<long long>(j) * ldb]
                                                          : Bb[j + static_cast<long long>(p) * ldb]);
            acc = acc16 ? half16(acc + a * bv) : acc + a * bv;
          }
        }
        TC& c = Cb[i + static_cast<long long>(j) * ldc];
        const double prev = be == 0.0 ? 0.0 : be * to_double(c);  // beta == 0: C is not read
        const double r = al * acc + prev;
        c = from_double<TC>(acc16 ? half16(r) : round_f32 ? static_cast<double>(static_cast<float>(r)) : r);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                           double* C, int ldc) {
  return gemm("cublasDgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sA,
                                         const float* B, int ldb, long long sB, const float* beta, float* C, int ldc,
                                         long long sC, int batch) {
  return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sA,
                                         const double* B, int ldb, long long sB, const double* beta, double* C, int ldc,
                                         long long sC, int batch) {
  return gemm("cublasDgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}

namespace {

const char* type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
  }
  return "(a cudaDataType the emulator does not run)";
}

// The Ex GEMMs: the element types must be one of the combinations cuBLAS documents for the compute
// type (A and B alike; C the same or float32 for 16-bit inputs); anything else is
// CUBLAS_STATUS_NOT_SUPPORTED with a line saying why.
cublasStatus_t gemm_ex(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, cudaDataType at, int lda, long long sA, const void* B,
                       cudaDataType bt, int ldb, long long sB, const void* beta, void* C, cudaDataType ct, int ldc,
                       long long sC, int batch, cublasComputeType_t compute) {
  const bool c32 = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                   compute == CUBLAS_COMPUTE_32F_FAST_16F || compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                   compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const bool half_in = at == CUDA_R_16F || at == CUDA_R_16BF;
  const bool c16 = compute == CUBLAS_COMPUTE_16F && at == CUDA_R_16F && ct == CUDA_R_16F;
  const bool ok =
      at == bt && (c16 || (c32 && (at == CUDA_R_32F ? ct == CUDA_R_32F : half_in && (ct == at || ct == CUDA_R_32F))) ||
                   (compute == CUBLAS_COMPUTE_64F && at == CUDA_R_64F && ct == CUDA_R_64F));
  if (!ok) {
    std::fprintf(stderr,
                 "gs_emu: %s: A %s, B %s, C %s with compute type %d is not a combination the emulator runs (A and B "
                 "alike; CUBLAS_COMPUTE_32F with 16F/16BF inputs and C of their type or 32F, or 32F throughout; "
                 "CUBLAS_COMPUTE_16F with 16F throughout; CUBLAS_COMPUTE_64F with 64F throughout)\n",
                 call, type_name(at), type_name(bt), type_name(ct), static_cast<int>(compute));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const auto* fa = static_cast<const float*>(alpha);
  const auto* fb = static_cast<const float*>(beta);
  if (c16)  // alpha and beta are __half for a 16F compute type
    return gemm(call, h, ta, tb, m, n, k, static_cast<const __half*>(alpha), static_cast<const __half*>(A), lda, sA,
                static_cast<const __half*>(B), ldb, sB, static_cast<const __half*>(beta), static_cast<__half*>(C), ldc,
                sC, batch, false, true);
  switch (at) {
    case CUDA_R_64F:
      return gemm(call, h, ta, tb, m, n, k, static_cast<const double*>(alpha), static_cast<const double*>(A), lda, sA,
                  static_cast<const double*>(B), ldb, sB, static_cast<const double*>(beta), static_cast<double*>(C),
                  ldc, sC, batch);
    case CUDA_R_32F:
      return gemm(call, h, ta, tb, m, n, k, fa, static_cast<const float*>(A), lda, sA, static_cast<const float*>(B),
                  ldb, sB, fb, static_cast<float*>(C), ldc, sC, batch, true);
    case CUDA_R_16F:
      if (ct == CUDA_R_32F)
        return gemm(call, h, ta, tb, m, n, k, fa, static_cast<const __half*>(A), lda, sA, static_cast<const __half*>(B),
                    ldb, sB, fb, static_cast<float*>(C), ldc, sC, batch, true);
      return gemm(call, h, ta, tb, m, n, k, fa, static_cast<const __half*>(A), lda, sA, static_cast<const __half*>(B),
                  ldb, sB, fb, static_cast<__half*>(C), ldc, sC, batch, true);
    case CUDA_R_16BF:
      if (ct == CUDA_R_32F)
        return gemm(call, h, ta, tb, m, n, k, fa, static_cast<const __nv_bfloat16*>(A), lda, sA,
                    static_cast<const __nv_bfloat16*>(B), ldb, sB, fb, static_cast<float*>(C), ldc, sC, batch, true);
      return gemm(call, h, ta, tb, m, n, k, fa, static_cast<const __nv_bfloat16*>(A), lda, sA,
                  static_cast<const __nv_bfloat16*>(B), ldb, sB, fb, static_cast<__nv_bfloat16*>(C), ldc, sC, batch,
                  true);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                            int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                 compute);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sA, const void* B, cudaDataType bt, int ldb, long long sB,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sC, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct,
                 ldc, sC, batch, compute);
}
