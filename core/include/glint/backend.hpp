#pragma once
// Where an engine (cluster finder, TV solver) runs: chosen once at start-up by a factory, the
// same way for every engine.
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "glint/log.hpp"

namespace glint {

enum class Backend { cpu, gpu, auto_select };

/// "cpu" | "gpu" | "auto"; throws std::invalid_argument naming the allowed values.
inline Backend parse_backend(std::string_view name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "gpu") return Backend::gpu;
  if (name == "auto") return Backend::auto_select;
  throw std::invalid_argument("unknown backend '" + std::string(name) +
                              "' (allowed: cpu, gpu, auto)");
}

inline std::string_view to_string(Backend backend) {
  switch (backend) {
    case Backend::cpu: return "cpu";
    case Backend::gpu: return "gpu";
    case Backend::auto_select: return "auto";
  }
  return "auto";
}

/// Builds `engine` (named in messages) on `backend`:
/// - cpu: make_cpu().
/// - gpu: make_gpu(); first, where gpu_unavailable() gives a reason why the GPU backends cannot
///   run here, throws std::runtime_error with it.
/// - auto_select: make_gpu() where the GPU backends can run; make_cpu() where they cannot, or
///   where make_gpu() throws (logged as a warning with the reason).
/// gpu_unavailable is called only for gpu and auto_select, so a CPU engine never probes for a GPU.
template <class T, class Probe, class MakeGpu, class MakeCpu>
std::unique_ptr<T> make_on_backend(Backend backend, std::string_view engine,
                                   Probe&& gpu_unavailable, MakeGpu&& make_gpu,
                                   MakeCpu&& make_cpu) {
  switch (backend) {
    case Backend::cpu: return make_cpu();
    case Backend::gpu: {
      const std::string why = gpu_unavailable();
      if (!why.empty())
        throw std::runtime_error(std::string(engine) + ": GPU backend not available: " + why +
                                 "; or choose the cpu backend (auto takes the GPU when one is "
                                 "usable, else the CPU)");
      return make_gpu();
    }
    case Backend::auto_select:
      if (gpu_unavailable().empty()) {
        try {
          return make_gpu();
        } catch (const std::exception& e) {
          log::warn("{}: GPU backend unusable ({}); using the CPU backend", engine, e.what());
        }
      }
      return make_cpu();
  }
  throw std::logic_error(std::string(engine) + ": unhandled backend");
}

}  // namespace glint
