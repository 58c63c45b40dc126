#include "glint/gpu/find_tuning.hpp"

#include <stdexcept>
#include <string>

namespace glint::gpu {

void validate(const FindTuning& t) {
  if (t.find_threads != 0 &&
      (t.find_threads < 128 || t.find_threads > 1024 || t.find_threads % 32 != 0))
    throw std::invalid_argument("GPU finder tuning: find_threads " +
                                std::to_string(t.find_threads) +
                                " (allowed: 0 for the defaults, or a multiple of 32 from 128 to "
                                "1024)");
  if (t.out_chunk < 1 || t.out_chunk > 65536)
    throw std::invalid_argument("GPU finder tuning: out_chunk " + std::to_string(t.out_chunk) +
                                " (allowed: 1 to 65536)");
  if (t.max_segments < 0)
    throw std::invalid_argument("GPU finder tuning: max_segments " +
                                std::to_string(t.max_segments) +
                                " (allowed: 0 for as many as fit, or a positive count)");
}

}  // namespace glint::gpu
