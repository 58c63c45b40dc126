#pragma once
// Correctly rounded IEEE arithmetic, one operation at a time, identical on host and device: the
// building blocks of every exact algorithm in glint (cluster finding in double, the TV solver's
// FGP step in float). No two operations are ever fused: on the GPU the _rn intrinsics guarantee
// that whatever -fmad says; host code that includes this compiles with -ffp-contract=off.
#include <cmath>

#include "glint/detail/hd.hpp"

namespace glint::rounded {

GLINT_HD double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
GLINT_HD double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
GLINT_HD double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
GLINT_HD double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
GLINT_HD double sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

GLINT_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GLINT_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GLINT_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GLINT_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GLINT_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// 1 / sqrt(s) for s >= 1 as two correctly rounded operations, RN(1 / RN(sqrt(s))): the same
/// bits as div(1.0f, sqrt(s)) for every s of [1, infinity]. On the device this runs the
/// sequences that sqrt.rn and rcp.rn run there once their range checks pass (the hardware's
/// approximate reciprocal square root and reciprocal, each refined by one Newton step of fused
/// multiply-adds), without those checks and without a branch: for finite s >= 1, sqrt(s) lies in
/// [1, 2^64] and its reciprocal is a normal float (the fused multiply-adds cannot overflow, since
/// only their rounded results are formed). Infinity makes the sequence NaN, and the final
/// max(., 0) turns that into 0, the reciprocal of infinity; it also gives 0 for NaN (the
/// projection never passes one). A GPU test compares every float of [1, infinity] with
/// div(1, sqrt(s)).
GLINT_HD float recip_sqrt(float s) {
#if defined(__CUDA_ARCH__)
  float y, r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(s));
  const float n0 = __fmul_rn(s, y), h = __fmul_rn(y, 0.5f);  // sqrt.rn's fast path
  const float n = __fmaf_rn(__fmaf_rn(-n0, n0, s), h, n0);
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(n));
  return fmaxf(__fmaf_rn(r, -__fmaf_rn(r, n, -1.0f), r), 0.0f);  // rcp.rn's fast path
#else
  return div(1.0f, sqrt(s));
#endif
}

}  // namespace glint::rounded
