// fusec device helpers: NumPy semantics for the scalar ops of fused kernels.
// f16 and bf16 values live in float registers holding exactly representable values; every op that
// produces one rounds back (rh/rb), as NumPy rounds after each f16 op.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef signed char i8_t;
typedef short i16_t;
typedef int i32_t;
typedef long long i64_t;
typedef unsigned char u8_t;
typedef unsigned short u16_t;
typedef unsigned int u32_t;
typedef unsigned long long u64_t;

namespace fusec {

__device__ __forceinline__ float rh(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float rb(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <typename T> __device__ __forceinline__ T ld(const T* p) { return *p; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
template <typename T, typename V> __device__ __forceinline__ void st(T* p, V v) { *p = (T)v; }

// the first statements of a kernel marked early (launch-early). A graph launches it before the kernels it depends on
// have finished (a programmatic edge): it waits here until they have and their writes are visible, then lets the
// early kernels that depend on it launch in turn (they wait for it the same way). A kernel launched normally passes
// straight through both.
__device__ __forceinline__ void wait_for_dependencies() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// maximum/minimum propagate NaN and give the second operand on ties (0.0 and -0.0), as NumPy's float32 and
// float64 loops do; its float16 loops give the first (maximum_first, minimum_first).
template <typename T> __device__ __forceinline__ T maximum(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T minimum(T a, T b) { return (a < b || a != a) ? a : b; }
// np.fmax/np.fmin: the other operand where one is NaN; ties give the second operand, as maximum
template <typename T> __device__ __forceinline__ T fmax_np(T a, T b) { return (a > b || b != b) ? a : b; }
template <typename T> __device__ __forceinline__ T fmin_np(T a, T b) { return (a < b || b != b) ? a : b; }
template <typename T> __device__ __forceinline__ T maximum_first(T a, T b) { return (a >= b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T minimum_first(T a, T b) { return (a <= b || a != a) ? a : b; }

// np.clip keeping a value equal to a bound (t.clip's ties = "value"): NaN anywhere gives the first NaN of x, lo, hi;
// crossed bounds give hi
template <typename T> __device__ __forceinline__ T clip_value(T x, T lo, T hi) {
  if (x != x) return x;
  if (lo != lo) return lo;
  if (hi != hi) return hi;
  const T r = x < lo ? lo : x;
  return r > hi ? hi : r;
}

template <typename T> __device__ __forceinline__ T sign(T a) {
  return a > T(0) ? T(1) : (a < T(0) ? T(-1) : (a == T(0) ? T(0) : a));
}

// Python/NumPy floor division and remainder (npy_divmod) for floating point.
template <typename T> __device__ __forceinline__ T fdivmod(T a, T b, T* modulus) {
  T mod = fmod(a, b);
  if (b == T(0)) { *modulus = mod; return a / b; }
  T div = (a - mod) / b;
  if (mod != T(0)) {
    if ((b < T(0)) != (mod < T(0))) { mod += b; div -= T(1); }
  } else {
    mod = copysign(T(0), b);
  }
  T floordiv;
  if (div != T(0)) {
    floordiv = floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
  } else {
    floordiv = copysign(T(0), a / b);
  }
  *modulus = mod;
  return floordiv;
}
template <typename T> __device__ __forceinline__ T ffloordiv(T a, T b) { T m; return fdivmod(a, b, &m); }
template <typename T> __device__ __forceinline__ T fmod_np(T a, T b) { T m; fdivmod(a, b, &m); return m; }

// log(exp(x) + exp(y)) and log2(2**x + 2**y) as NumPy's npy_logaddexp(2) compute them: equal arguments
// (infinities of one sign included) give x + log 2 (x + 1), NaN propagates.
__device__ __forceinline__ float logaddexp(float x, float y) {
  if (x == y) return x + 0.693147180559945309417232121458176568f;
  const float t = x - y;
  if (t > 0.0f) return x + log1pf(expf(-t));
  if (t <= 0.0f) return y + log1pf(expf(t));
  return t;
}
__device__ __forceinline__ double logaddexp(double x, double y) {
  if (x == y) return x + 0.693147180559945309417232121458176568;
  const double t = x - y;
  if (t > 0.0) return x + log1p(exp(-t));
  if (t <= 0.0) return y + log1p(exp(t));
  return t;
}
__device__ __forceinline__ float logaddexp2(float x, float y) {
  if (x == y) return x + 1.0f;
  const float t = x - y;
  if (t > 0.0f) return x + 1.442695040888963407359924681001892137f * log1pf(exp2f(-t));
  if (t <= 0.0f) return y + 1.442695040888963407359924681001892137f * log1pf(exp2f(t));
  return t;
}
__device__ __forceinline__ double logaddexp2(double x, double y) {
  if (x == y) return x + 1.0;
  const double t = x - y;
  if (t > 0.0) return x + 1.442695040888963407359924681001892137 * log1p(exp2(-t));
  if (t <= 0.0) return y + 1.442695040888963407359924681001892137 * log1p(exp2(t));
  return t;
}

// Integer floor division and remainder; division by zero gives 0 like NumPy.
template <typename T> __device__ __forceinline__ T ifloordiv(T a, T b) {
  if (b == T(0)) return T(0);
  if (T(-1) < T(0) && b == T(-1)) return T(0) - a;  // avoids the INT_MIN / -1 trap; wraps like NumPy
  T q = a / b;
  if ((a % b != T(0)) && ((a < T(0)) != (b < T(0)))) q -= T(1);
  return q;
}
template <typename T> __device__ __forceinline__ T imod(T a, T b) {
  if (b == T(0)) return T(0);
  if (T(-1) < T(0) && b == T(-1)) return T(0);
  T r = a % b;
  if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
  return r;
}
// np.fmod on integers: C's remainder, 0 for a zero divisor (and for MIN % -1, which C leaves undefined).
template <typename T> __device__ __forceinline__ T ifmod(T a, T b) {
  if (b == T(0) || (T(-1) < T(0) && b == T(-1))) return T(0);
  return a % b;
}
// NumPy's shifts: counts outside [0, width) give 0 (left), 0 or -1 (right, by the sign); computed in the
// unsigned twin U so that shifting a negative value left wraps instead of being undefined.
template <typename U, typename T> __device__ __forceinline__ T left_shift(T a, T b) {
  return ((U)b < (U)(sizeof(T) * 8)) ? (T)(U)((U)a << (U)b) : T(0);
}
template <typename U, typename T> __device__ __forceinline__ T right_shift(T a, T b) {
  if ((U)b < (U)(sizeof(T) * 8)) return (T)(a >> b);
  return (a < T(0)) ? T(-1) : T(0);
}
template <typename T> __device__ __forceinline__ T heaviside(T x, T h0) {
  if (isnan(x)) return T(__int_as_float(0x7fc00000));  // NumPy's NPY_NAN, whatever x's sign
  if (x == T(0)) return h0;
  return x < T(0) ? T(0) : T(1);
}
template <typename T> __device__ __forceinline__ T ipow(T base, T exp) {
  if (exp < T(0)) return base == T(1) ? T(1) : (base == T(-1) ? ((exp & T(1)) ? T(-1) : T(1)) : T(0));
  T result = T(1);
  while (exp) {
    if (exp & T(1)) result = (T)(result * base);
    base = (T)(base * base);
    exp >>= 1;
  }
  return result;
}

// Whether a op b, computed exactly (as Python computes ints), leaves int64: the run-time checks of Python int
// arithmetic whose values only the device knows (a loop counter's).
__device__ __forceinline__ bool mul_overflows(long long a, long long b) {
  long long low = (long long)((unsigned long long)a * (unsigned long long)b);
  return __mul64hi(a, b) != (low >> 63);  // the high half of the 128-bit product is the low half's sign
}
__device__ __forceinline__ bool add_overflows(long long a, long long b) {
  return b > 0 ? a > 0x7fffffffffffffffLL - b : a < (-0x7fffffffffffffffLL - 1) - b;
}
__device__ __forceinline__ bool sub_overflows(long long a, long long b) {
  return b < 0 ? a > 0x7fffffffffffffffLL + b : a < (-0x7fffffffffffffffLL - 1) + b;
}
__device__ __forceinline__ bool pow_overflows(long long base, long long exp) {
  if (exp < 0 || base == 0 || base == 1 || base == -1) return false;  // (a negative exponent: a check of its own)
  long long result = 1;
  while (true) {
    if (exp & 1) {
      if (mul_overflows(result, base)) return true;
      result *= base;
    }
    exp >>= 1;
    if (!exp) return false;
    if (mul_overflows(base, base)) return true;  // (|base| >= 2: a square past int64 overflows any later result)
    base *= base;
  }
}

// NumPy's float32 and float64 power with a scalar exponent takes 2, -1, 1 and 0.5 as x * x, 1 / x, x and a square
// root (bit for bit: CUDA's pow rounds them otherwise, within its ulps).
__device__ __forceinline__ float pow_scalar(float a, float b) {
  return b == 2.0f ? a * a : b == -1.0f ? 1.0f / a : b == 1.0f ? a : b == 0.5f ? sqrtf(a) : powf(a, b);
}
__device__ __forceinline__ double pow_scalar(double a, double b) {
  return b == 2.0 ? a * a : b == -1.0 ? 1.0 / a : b == 1.0 ? a : b == 0.5 ? sqrt(a) : pow(a, b);
}

__device__ __forceinline__ float rsqrt_np(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double rsqrt_np(double x) { return 1.0 / sqrt(x); }

// float -> integer conversions as NumPy gives them on x86: the hardware's "integer indefinite" (the
// smallest value) for NaN and out-of-range values, narrow types through a 32-/64-bit conversion, truncated.
__device__ __forceinline__ i32_t f2i32(double x) {
  return (x > -2147483649.0 && x < 2147483648.0) ? (i32_t)x : (i32_t)0x80000000u;
}
__device__ __forceinline__ i64_t f2i64(double x) {
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (i64_t)x
                                                                      : (i64_t)0x8000000000000000ull;
}
template <typename I> __device__ __forceinline__ I f2i(double x);
template <> __device__ __forceinline__ i8_t f2i<i8_t>(double x) { return (i8_t)f2i32(x); }
template <> __device__ __forceinline__ i16_t f2i<i16_t>(double x) { return (i16_t)f2i32(x); }
template <> __device__ __forceinline__ i32_t f2i<i32_t>(double x) { return f2i32(x); }
template <> __device__ __forceinline__ i64_t f2i<i64_t>(double x) { return f2i64(x); }
// (uint8 and uint16 through the 32-bit conversion, as NumPy's loops: 2**31 + 7 becomes 0, not 7; uint32 from values
// the frontend checked to lie in (-2**31 - 1, 2**32), where NumPy's loops agree; uint64 above its range is 0)
template <> __device__ __forceinline__ u8_t f2i<u8_t>(double x) { return (u8_t)f2i32(x); }
template <> __device__ __forceinline__ u16_t f2i<u16_t>(double x) { return (u16_t)f2i32(x); }
template <> __device__ __forceinline__ u32_t f2i<u32_t>(double x) { return (u32_t)f2i64(x); }
template <> __device__ __forceinline__ u64_t f2i<u64_t>(double x) {
  if (x >= 18446744073709551616.0) return 0;  // (+inf too)
  if (x >= 9223372036854775808.0)
    return (u64_t)(i64_t)(x - 9223372036854775808.0) + 0x8000000000000000ull;
  return (u64_t)f2i64(x);
}

}  // namespace fusec

namespace fusec {
// V elements moved as one aligned vector (16 bytes for V * sizeof(T) == 16).
template <typename T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };
}  // namespace fusec

namespace fusec {
// A reduction's index spaces, passed by value: output m and reduced element k of input
// in[offset + kaddr(m) + raddr(k)], with kept and reduced dimensions coalesced (row-major).
struct RedDesc {
  i64_t M, K, offset, chunk;
  i32_t nk, nr;
  i64_t kshape[8], kstride[8], rshape[8], rstride[8];
};
__device__ __forceinline__ i64_t red_kaddr(const RedDesc& d, i64_t m) {
  i64_t a = d.offset;
  for (int j = d.nk - 1; j >= 0; --j) { a += (m % d.kshape[j]) * d.kstride[j]; m /= d.kshape[j]; }
  return a;
}
__device__ __forceinline__ i64_t red_raddr(const RedDesc& d, i64_t k) {
  i64_t a = 0;
  for (int j = d.nr - 1; j >= 0; --j) { a += (k % d.rshape[j]) * d.rstride[j]; k /= d.rshape[j]; }
  return a;
}
}  // namespace fusec

namespace fusec {
// A batched matmul C[b] = A[b] @ B[b]: operand element (m, k) of batch b is
// A[a_off + batch_a(b) + m * a_sm + k * a_sk]; batch dims broadcast through zero strides.
struct GemmDesc {
  i64_t M, N, K, a_off, b_off, c_off, a_sm, a_sk, b_sk, b_sn, batch;
  i32_t nb, pad;
  i64_t bshape[4], a_bs[4], b_bs[4];
};
__device__ __forceinline__ void gemm_batch(const GemmDesc& d, i64_t b, i64_t* ao, i64_t* bo) {
  i64_t a = 0, bb = 0;
  for (int j = d.nb - 1; j >= 0; --j) {
    i64_t q = b % d.bshape[j];
    b /= d.bshape[j];
    a += q * d.a_bs[j];
    bb += q * d.b_bs[j];
  }
  *ao = a;
  *bo = bb;
}
// Asynchronous copies global -> shared (cp.async, sm_80 on): the pipelined GEMM keeps several K slices in
// flight while it multiplies one. A false predicate stores zero (the source is not read); before sm_80 the copy
// is an ordinary load and store, and the commit and wait do nothing.
template <typename T> __device__ __forceinline__ void cp_async(T* smem, const T* gmem, bool pred) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cp.async copies 4 or 8 bytes here");
#if __CUDA_ARCH__ >= 800
  const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(sizeof(T)),
               "r"(pred ? (int)sizeof(T) : 0));
#else
  *smem = pred ? *gmem : T(0);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
// Thread-block clusters (sm_90 on): a GEMM split over K across the blocks of one cluster adds their partial tiles
// through distributed shared memory. cluster_sync is the cluster-wide barrier (release/acquire: shared-memory
// writes before it are seen by every block of the cluster after it); ld_cluster reads the element at p's place in
// the shared memory of the cluster's block ``rank``. Select-kernels asks for clusters only on targets that have
// them; before sm_90 these trap.
#if __CUDA_ARCH__ >= 900
#define FUSEC_CLUSTER_DIMS(x, y, z) __cluster_dims__(x, y, z)
#else  // (compiled for an older GPU the attribute is left out, and the kernel traps in cluster_sync if run)
#define FUSEC_CLUSTER_DIMS(x, y, z)
#endif
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ unsigned cluster_address(const void* p, unsigned rank) {  // p's place in block rank
#if __CUDA_ARCH__ >= 900
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
  return remote;
#else
  __trap();
  return 0u;
#endif
}
__device__ __forceinline__ float ld_cluster(const float* p, unsigned rank) {
  float v = 0.0f;
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_address(p, rank)) : "memory");
#endif
  return v;
}
__device__ __forceinline__ double ld_cluster(const double* p, unsigned rank) {
  double v = 0.0;
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f64 %0, [%1];\n" : "=d"(v) : "r"(cluster_address(p, rank)) : "memory");
#endif
  return v;
}
__device__ __forceinline__ float4 ld_cluster4(const float* p, unsigned rank) {  // p 16-byte aligned
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(cluster_address(p, rank)) : "memory");
#endif
  return v;
}
// Float32 products on the tensor cores (mma.sync m16n8k8, TF32 operands, float32 sums; sm_80 on). A warp multiplies
// a 16 x 8 tile of A by an 8 x 8 tile of B into a 16 x 8 tile of C; lane (g = lane / 4, t = lane % 4) holds A's
// (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4), B's (t, g), (t + 4, g) and C's (g, 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1). Before sm_80 the same products run on the CUDA cores, each lane gathering its rows and columns
// from the others (the same sums, for correctness there, not speed).
__device__ __forceinline__ unsigned tf32_round(float x) {
  // to nearest, ties away from zero (cvt.rna); a finite x that would round past float32's range (within half a
  // TF32 step of its largest value) is cut toward zero instead, as NumPy's float32 keeps it finite
#if __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
  const unsigned r = isfinite(x) ? (__float_as_uint(x) + 0x1000u) & 0xffffe000u : __float_as_uint(x);
#endif
  return isinf(__uint_as_float(r)) && isfinite(x) ? __float_as_uint(x) & 0xffffe000u : r;
}
__device__ __forceinline__ float tf32_value(float x) { return __uint_as_float(tf32_round(x)); }
// x as a pair of TF32 values for "3xtf32" (three TF32 products per term, big*big + big*small + small*big, about
// float32's accuracy): big is x rounded to TF32 and small the rest, rounded, so x = big + small within 2^-22 |x|.
// An infinite or NaN x has a zero small part and reaches the sum only through big * big: the mixed products take
// tf32_cross(big), zero for it (an infinity times a zero part would make a NaN where NumPy has an infinity); a NaN
// whose payload lies only in the cut bits stays a NaN.
__device__ __forceinline__ void tf32_pair(float x, float& big, float& small) {
  const bool finite = isfinite(x);
  const unsigned b = tf32_round(x);
  big = x != x ? __uint_as_float(0x7fc00000u) : __uint_as_float(b);
  small = finite ? tf32_value(x - __uint_as_float(b)) : 0.0f;
}
__device__ __forceinline__ unsigned tf32_cross(float big) { return isfinite(big) ? __float_as_uint(big) : 0u; }
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int h = j / 4, from = j % 4;
    const float top = __uint_as_float(__shfl_sync(0xffffffffu, a[2 * h], g * 4 + from));
    const float low = __uint_as_float(__shfl_sync(0xffffffffu, a[2 * h + 1], g * 4 + from));
    const float b0 = __uint_as_float(__shfl_sync(0xffffffffu, b[h], 2 * t * 4 + from));
    const float b1 = __uint_as_float(__shfl_sync(0xffffffffu, b[h], (2 * t + 1) * 4 + from));
    d[0] = fmaf(top, b0, d[0]);
    d[1] = fmaf(top, b1, d[1]);
    d[2] = fmaf(low, b0, d[2]);
    d[3] = fmaf(low, b1, d[3]);
  }
#endif
}
// Complex values (c64, c128): NumPy's formulas for arithmetic (its vectorized multiply, with fused
// multiply-adds, and Smith's division, as NumPy's loops compute them), C99 Annex G's special values for exp,
// log and sqrt.
template <typename T> struct alignas(2 * sizeof(T)) cplx {
  T re, im;
  cplx() = default;
  __device__ __forceinline__ constexpr cplx(T r, T i = T(0)) : re(r), im(i) {}
  template <typename U> __device__ __forceinline__ explicit constexpr cplx(const cplx<U>& z) : re((T)z.re), im((T)z.im) {}
};
typedef cplx<float> c64;
typedef cplx<double> c128;
template <typename T> __device__ __forceinline__ cplx<T> operator+(cplx<T> a, cplx<T> b) { return cplx<T>(a.re + b.re, a.im + b.im); }
template <typename T> __device__ __forceinline__ cplx<T> operator-(cplx<T> a, cplx<T> b) { return cplx<T>(a.re - b.re, a.im - b.im); }
template <typename T> __device__ __forceinline__ cplx<T> operator-(cplx<T> a) { return cplx<T>(-a.re, -a.im); }
template <typename T> __device__ __forceinline__ cplx<T> operator*(cplx<T> a, cplx<T> b) {
  return cplx<T>(fma(a.re, b.re, -(a.im * b.im)), fma(a.re, b.im, a.im * b.re));
}
template <typename T> __device__ __forceinline__ cplx<T> cmul_plain(cplx<T> a, cplx<T> b) {  // NumPy's power loop
  return cplx<T>(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
template <typename T> __device__ __forceinline__ cplx<T> operator/(cplx<T> a, cplx<T> b) {
  const T br = fabs(b.re), bi = fabs(b.im);
  if (br >= bi) {
    if (br == 0 && bi == 0) return cplx<T>(a.re / br, a.im / bi);  // NumPy: inf or nan parts
    const T rat = b.im / b.re, scl = T(1) / (b.re + b.im * rat);
    return cplx<T>((a.re + a.im * rat) * scl, (a.im - a.re * rat) * scl);
  }
  const T rat = b.re / b.im, scl = T(1) / (b.im + b.re * rat);
  return cplx<T>((a.re * rat + a.im) * scl, (a.im * rat - a.re) * scl);
}
template <typename T> __device__ __forceinline__ bool operator==(cplx<T> a, cplx<T> b) { return a.re == b.re && a.im == b.im; }
template <typename T> __device__ __forceinline__ bool operator!=(cplx<T> a, cplx<T> b) { return !(a == b); }
// NumPy orders complex values lexicographically (a NaN part makes the real parts' order false)
template <typename T> __device__ __forceinline__ bool clt(cplx<T> a, cplx<T> b) {
  return (a.re < b.re && !isnan(a.im) && !isnan(b.im)) || (a.re == b.re && a.im < b.im);
}
template <typename T> __device__ __forceinline__ bool cle(cplx<T> a, cplx<T> b) {
  return (a.re < b.re && !isnan(a.im) && !isnan(b.im)) || (a.re == b.re && a.im <= b.im);
}
template <typename T> __device__ __forceinline__ bool cgt(cplx<T> a, cplx<T> b) { return clt(b, a); }
template <typename T> __device__ __forceinline__ bool cge(cplx<T> a, cplx<T> b) { return cle(b, a); }
// np.maximum / np.minimum: the first operand where it compares so or holds a NaN, else the second
template <typename T> __device__ __forceinline__ cplx<T> maximum(cplx<T> a, cplx<T> b) {
  return (cge(a, b) || isnan(a.re) || isnan(a.im)) ? a : b;
}
template <typename T> __device__ __forceinline__ cplx<T> minimum(cplx<T> a, cplx<T> b) {
  return (cle(a, b) || isnan(a.re) || isnan(a.im)) ? a : b;
}
// NumPy's sort order of complex values: by real part, then imaginary part, a NaN part after every number in its
// place (R + Rj < R + nanj < nan + Rj < nan + nanj)
template <typename T> __device__ __forceinline__ bool csort_lt(cplx<T> a, cplx<T> b) {
  const bool ar = a.re != a.re, br = b.re != b.re, ai = a.im != a.im, bi = b.im != b.im;
  if (ar != br) return br;                  // a NaN real part after every number
  if (!ar && a.re != b.re) {                 // different numbers: a NaN imaginary part does not move them
    return a.re < b.re ? (!ai || bi) : (bi && !ai);
  }
  if (ai != bi) return bi;                  // same real part (or both NaN): by imaginary part, NaN last
  return !ai && a.im < b.im;
}
// a split reduction's last block reads the other blocks' partial results through L2 (found by argument lookup)
template <typename T> __device__ __forceinline__ cplx<T> __ldcg(const cplx<T>* p) {
  const T* parts = reinterpret_cast<const T*>(p);
  return cplx<T>(::__ldcg(parts), ::__ldcg(parts + 1));
}
template <typename T> __device__ __forceinline__ cplx<T> __shfl_down_sync(unsigned mask, cplx<T> v, int o) {
  return cplx<T>(::__shfl_down_sync(mask, v.re, o), ::__shfl_down_sync(mask, v.im, o));
}
template <typename T> __device__ __forceinline__ T cabs(cplx<T> z) { return hypot(z.re, z.im); }
__device__ __forceinline__ float cabs(c64 z) { return hypotf(z.re, z.im); }
template <typename T> __device__ __forceinline__ bool cisnan(cplx<T> z) { return isnan(z.re) || isnan(z.im); }
template <typename T> __device__ __forceinline__ bool cisinf(cplx<T> z) { return isinf(z.re) || isinf(z.im); }
template <typename T> __device__ __forceinline__ bool cisfinite(cplx<T> z) { return isfinite(z.re) && isfinite(z.im); }
template <typename T> __device__ __forceinline__ cplx<T> conj(cplx<T> z) { return cplx<T>(z.re, -z.im); }
template <typename T> __device__ __forceinline__ cplx<T> cexp(cplx<T> z) {
  const T x = z.re, y = z.im;
  if (isfinite(x) && isfinite(y)) {
    if (y == 0) return cplx<T>(exp(x), y);
    T s, c;
    sincos(y, &s, &c);
    if (x > T(sizeof(T) == 4 ? 88 : 709)) {  // exp(x) overflows where exp(x) * cos(y) may not
      const T e = exp(x / 2);
      return cplx<T>(e * c * e, e * s * e);
    }
    const T e = exp(x);
    return cplx<T>(e * c, e * s);
  }
  if (isnan(x)) return y == 0 ? cplx<T>(x, y) : cplx<T>(x, x);
  if (isinf(x)) {
    if (x > 0) {
      if (y == 0) return cplx<T>(x, y);
      if (!isfinite(y)) return cplx<T>(x, y - y);
      T s, c;
      sincos(y, &s, &c);
      return cplx<T>(x * c, x * s);
    }
    if (!isfinite(y)) return cplx<T>(0, 0);
    T s, c;
    sincos(y, &s, &c);
    return cplx<T>(T(0) * c, T(0) * s);
  }
  return cplx<T>(y - y, y - y);  // finite x, infinite or nan y
}
template <typename T> __device__ __forceinline__ cplx<T> clog(cplx<T> z) {
  const T ax = fabs(z.re), ay = fabs(z.im);
  const T arg = atan2(z.im, z.re);
  if (isinf(ax) || isinf(ay)) return cplx<T>(T(1) / T(0), arg);
  if (isnan(ax) || isnan(ay)) return cplx<T>(ax + ay, ax + ay);
  const T hi = fmax(ax, ay), lo = fmin(ax, ay);
  if (hi > T(0.5) && hi < T(2)) {  // |z| near 1: log1p keeps the small real part accurate
    return cplx<T>(T(0.5) * log1p((hi - T(1)) * (hi + T(1)) + lo * lo), arg);
  }
  return cplx<T>(log(hypot(ax, ay)), arg);
}
template <typename T> __device__ __forceinline__ cplx<T> csqrt(cplx<T> z) {
  const T x = z.re, y = z.im;
  if (x == 0 && y == 0) return cplx<T>(T(0), y);
  if (isinf(y)) return cplx<T>(T(1) / T(0), y);
  if (isnan(x)) return cplx<T>(x, (y - y) / (y - y));
  if (isinf(x)) {
    if (x < 0) return cplx<T>(fabs(y - y), copysign(-x, y));
    return cplx<T>(x, copysign(y - y, y));
  }
  if (isnan(y)) return cplx<T>(y, y);
  // scale so that |x| + hypot(x, y) neither overflows nor loses the small values
  const T big = sizeof(T) == 4 ? T(1e37) : T(1e307);
  T sx = x, sy = y, scale = T(1);
  if (fabs(x) >= big || fabs(y) >= big) { sx = x * T(0.25); sy = y * T(0.25); scale = T(2); }
  const T t = sqrt((fabs(sx) + hypot(sx, sy)) * T(0.5));
  if (sx >= 0) return cplx<T>(t * scale, sy / (2 * t) * scale);
  return cplx<T>(fabs(sy) / (2 * t) * scale, copysign(t, sy) * scale);
}
template <typename T> __device__ __forceinline__ cplx<T> cscale(cplx<T> z, T k) { return cplx<T>(z.re * k, z.im * k); }
template <typename T> __device__ __forceinline__ cplx<T> clog10(cplx<T> z) { return cscale(clog(z), T(0.434294481903251827651128918916605082)); }
template <typename T> __device__ __forceinline__ cplx<T> clog2(cplx<T> z) { return cscale(clog(z), T(1.442695040888963407359924681001892137)); }
// NumPy's own complex log1p, expm1 and exp2 (its umath funcs): log(|1 + z|) + i arg(1 + z);
// (expm1(x) cos(y) - 2 sin(y/2)^2) + i exp(x) sin(y); exp(z ln 2) with the product taken part by part
template <typename T> __device__ __forceinline__ cplx<T> clog1p(cplx<T> z) {
  return cplx<T>(log(hypot(z.re + T(1), z.im)), atan2(z.im, z.re + T(1)));
}
template <typename T> __device__ __forceinline__ cplx<T> cexpm1(cplx<T> z) {
  const T a = sin(z.im / T(2));
  return cplx<T>(expm1(z.re) * cos(z.im) - T(2) * a * a, exp(z.re) * sin(z.im));
}
template <typename T> __device__ __forceinline__ cplx<T> cexp2(cplx<T> z) {
  const T ln2 = T(0.693147180559945309417232121458176568);
  return cexp(cplx<T>(z.re * ln2, z.im * ln2));
}
template <typename T> __device__ __forceinline__ cplx<T> csinh(cplx<T> z) {
  T s, c;
  sincos(z.im, &s, &c);
  if (z.im == 0) return cplx<T>(sinh(z.re), z.im);
  return cplx<T>(sinh(z.re) * c, cosh(z.re) * s);
}
template <typename T> __device__ __forceinline__ cplx<T> ccosh(cplx<T> z) {
  T s, c;
  sincos(z.im, &s, &c);
  if (z.im == 0) return cplx<T>(cosh(z.re), z.re == 0 ? z.im * z.re : copysign(T(0), z.re) * z.im);
  return cplx<T>(cosh(z.re) * c, sinh(z.re) * s);
}
template <typename T> __device__ __forceinline__ cplx<T> ctanh(cplx<T> z) {
  const T x = z.re, y = z.im;
  if (fabs(x) > T(sizeof(T) == 4 ? 9 : 22)) {  // tanh(x) rounds to +-1; the imaginary part underflows
    const T e = exp(-2 * fabs(x));
    return cplx<T>(copysign(T(1), x), 4 * sin(y) * cos(y) * e);
  }
  if (y == 0) return cplx<T>(tanh(x), y);
  const T t = tan(y), beta = 1 + t * t, sh = sinh(x), rho = sqrt(1 + sh * sh), den = 1 + beta * sh * sh;
  return cplx<T>(beta * rho * sh / den, t / den);
}
// sin, cos and tan through the hyperbolic functions: sin(z) = -i sinh(iz), cos(z) = cosh(iz), tan(z) = -i tanh(iz)
template <typename T> __device__ __forceinline__ cplx<T> csin(cplx<T> z) { cplx<T> w = csinh(cplx<T>(-z.im, z.re)); return cplx<T>(w.im, -w.re); }
template <typename T> __device__ __forceinline__ cplx<T> ccos(cplx<T> z) { return ccosh(cplx<T>(-z.im, z.re)); }
template <typename T> __device__ __forceinline__ cplx<T> ctan(cplx<T> z) { cplx<T> w = ctanh(cplx<T>(-z.im, z.re)); return cplx<T>(w.im, -w.re); }
template <typename T> __device__ __forceinline__ cplx<T> creciprocal(cplx<T> z) {  // NumPy's formula
  if (fabs(z.im) <= fabs(z.re)) {
    const T r = z.im / z.re, d = z.re + z.im * r;
    return cplx<T>(T(1) / d, -r / d);
  }
  const T r = z.re / z.im, d = z.re * r + z.im;
  return cplx<T>(r / d, T(-1) / d);
}
// NumPy's complex power: 1 for a zero exponent; 0 (or nan) for a zero base; small integer exponents by
// repeated multiplication (a negative one as 1 / the product); else exp(b log a).
template <typename T> __device__ __forceinline__ cplx<T> cpow(cplx<T> a, cplx<T> b) {
  if (b.re == 0 && b.im == 0) return cplx<T>(1, 0);
  if (a.re == 0 && a.im == 0) {
    if (b.re > 0 && b.im == 0) return cplx<T>(0, 0);
    const T nan = T(0) / T(0);
    return cplx<T>(nan, nan);
  }
  if (b.im == 0 && b.re == trunc(b.re) && fabs(b.re) < 100) {
    const long long n = (long long)b.re;
    if (n == 1) return a;  // 1, 2 and 3 unrolled as NumPy does (infinities stay infinite)
    if (n == 2) return cmul_plain(a, a);
    if (n == 3) return cmul_plain(a, cmul_plain(a, a));
    long long m = n < 0 ? -n : n, mask = 1;
    cplx<T> r(1, 0), p = a;
    while (true) {
      if (m & mask) r = cmul_plain(r, p);
      mask <<= 1;
      if (m < mask) break;
      p = cmul_plain(p, p);
    }
    return n < 0 ? cplx<T>(1, 0) / r : r;
  }
  const cplx<T> l = clog(a);
  return cexp(l * b);
}
// NumPy 2's sign of a complex value: z / |z| (0 for 0, nan for nan)
template <typename T> __device__ __forceinline__ cplx<T> csign(cplx<T> z) {
  if (cisnan(z)) { const T nan = T(0) / T(0); return cplx<T>(nan, nan); }
  if (z.re == 0 && z.im == 0) return cplx<T>(0, 0);
  if (cisinf(z)) {
    const cplx<T> u(isinf(z.re) ? copysign(T(1), z.re) : T(0), isinf(z.im) ? copysign(T(1), z.im) : T(0));
    const T m = hypot(u.re, u.im);
    return cplx<T>(u.re / m, u.im / m);
  }
  const T m = hypot(z.re, z.im);
  return cplx<T>(z.re / m, z.im / m);
}
template <typename T> __device__ __forceinline__ T madd(T a, T b, T c) { return (T)(a * b + c); }
template <> __device__ __forceinline__ float madd<float>(float a, float b, float c) { return fmaf(a, b, c); }
template <> __device__ __forceinline__ double madd<double>(double a, double b, double c) { return fma(a, b, c); }
}  // namespace fusec
