#pragma once
// GLINT_HD: a function compiled for host and device under nvcc (forced inline there), an inline
// host function elsewhere. Used by the code that host and device must compute identically.

#if defined(__CUDACC__)
#define GLINT_HD __host__ __device__ __forceinline__
#else
#define GLINT_HD inline
#endif
