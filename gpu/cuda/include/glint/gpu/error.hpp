#pragma once
#include <stdexcept>
#include <string>

namespace glint::gpu {

/// A failed CUDA runtime or cuFFT call: what was called, where, and the library's message.
/// A sticky error (the context is unusable) is marked so that the daemon exits and systemd
/// restarts it.
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
