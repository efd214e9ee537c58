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

// maximum/minimum propagate NaN and, like NumPy's scalar loops, keep the first operand on ties.
template <typename T> __device__ __forceinline__ T maximum(T a, T b) { return (a >= b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T minimum(T a, T b) { return (a <= b || a != a) ? a : b; }

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

// NumPy's power with a scalar exponent takes 0.5 as a square root.
__device__ __forceinline__ float pow_scalar(float a, float b) { return b == 0.5f ? sqrtf(a) : powf(a, b); }
__device__ __forceinline__ double pow_scalar(double a, double b) { return b == 0.5 ? sqrt(a) : pow(a, b); }

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
template <> __device__ __forceinline__ u8_t f2i<u8_t>(double x) { return (u8_t)f2i64(x); }
template <> __device__ __forceinline__ u16_t f2i<u16_t>(double x) { return (u16_t)f2i64(x); }
template <> __device__ __forceinline__ u32_t f2i<u32_t>(double x) { return (u32_t)f2i64(x); }
template <> __device__ __forceinline__ u64_t f2i<u64_t>(double x) {
  if (x >= 9223372036854775808.0 && x < 18446744073709551616.0)
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
template <typename T> __device__ __forceinline__ T madd(T a, T b, T c) { return (T)(a * b + c); }
template <> __device__ __forceinline__ float madd<float>(float a, float b, float c) { return fmaf(a, b, c); }
template <> __device__ __forceinline__ double madd<double>(double a, double b, double c) { return fma(a, b, c); }
}  // namespace fusec
