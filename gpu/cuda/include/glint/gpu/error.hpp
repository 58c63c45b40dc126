#pragma once
#include <stdexcept>
#include <string>

namespace glint::gpu {

/// A failed CUDA runtime or cuFFT call: what was called, where, and the library's message.
///
/// sticky(): the error left the CUDA context unusable (cudaErrorIllegalAddress,
/// cudaErrorLaunchFailure, cudaErrorIllegalInstruction, cudaErrorMisalignedAddress, ...): every
/// later call in this process fails too. It is fatal for the process: the run that meets it fails
/// with RunStats::fatal, its file is closed, and glintd reports it and exits with status 3 so
/// that systemd starts a fresh process. A non-sticky error (e.g. out of memory) fails only the
/// run.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& what, int code, bool sticky)
      : std::runtime_error(what), code_(code), sticky_(sticky) {}
  int code() const { return code_; }
  bool sticky() const { return sticky_; }

 private:
  int code_;
  bool sticky_;
};

}  // namespace glint::gpu
