#pragma once
// Checked CUDA calls: every runtime and cuFFT call goes through these macros, which throw
// glint::gpu::CudaError with file:line. Destructors use GLINT_CUDA_LOG instead (never throw).
#include <cuda_runtime.h>
#include <cufft.h>

#include <string>

#include "glint/gpu/error.hpp"
#include "glint/log.hpp"

namespace glint::gpu::detail {

inline bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")",
                  static_cast<int>(e), is_sticky(e));
}

[[noreturn]] inline void throw_cufft(cufftResult r, const char* call, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                      " failed: cuFFT error " + std::to_string(static_cast<int>(r)),
                  static_cast<int>(r), false);
}

}  // namespace glint::gpu::detail

#define GLINT_CUDA_CHECK(call)                                                         \
  do {                                                                                 \
    const cudaError_t glint_e_ = (call);                                               \
    if (glint_e_ != cudaSuccess)                                                       \
      ::glint::gpu::detail::throw_cuda(glint_e_, #call, __FILE__, __LINE__);           \
  } while (0)

#define GLINT_CUFFT_CHECK(call)                                                        \
  do {                                                                                 \
    const cufftResult glint_r_ = (call);                                               \
    if (glint_r_ != CUFFT_SUCCESS)                                                     \
      ::glint::gpu::detail::throw_cufft(glint_r_, #call, __FILE__, __LINE__);          \
  } while (0)

/// For launches: checks the launch itself (configuration errors); execution errors surface at
/// the next synchronising call.
#define GLINT_CUDA_CHECK_LAUNCH() GLINT_CUDA_CHECK(cudaGetLastError())

/// For destructors and other no-throw paths: logs and carries on.
#define GLINT_CUDA_LOG(call)                                                           \
  do {                                                                                 \
    const cudaError_t glint_e_ = (call);                                               \
    if (glint_e_ != cudaSuccess)                                                       \
      ::glint::log::write(::glint::log::Level::error,                                  \
                          std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                              #call + " failed: " + cudaGetErrorName(glint_e_));       \
  } while (0)
