#include "glint/pipeline/frame_preprocessing.hpp"

namespace glint::pipeline {

FramePreprocessing::FramePreprocessing(const config::Config&) {}

void FramePreprocessing::apply(uint64_t, std::span<uint16_t>) const {}

}  // namespace glint::pipeline
