#include "glint/pipeline/frame_source.hpp"

namespace glint::pipeline {

FrameSource::FrameSource(const config::Config& cfg)
    : part_timeout_(cfg.ingest.part_timeout_ms), cfg_(cfg),
      assembler_(cfg.detector, cfg.ingest) {}

FrameSource::~FrameSource() { stop(); }

void FrameSource::connect() {
  ingest_owner_ = std::make_unique<Ingest>(cfg_, assembler_);
  ingest_.store(ingest_owner_.get());
}

void FrameSource::stop_input() {
  stop();
  assembler_.flush_pending();
}

void FrameSource::stop() {
  if (Ingest* in = ingest_.load()) in->stop();
}

std::optional<std::string> FrameSource::ended(std::chrono::steady_clock::time_point now) {
  Ingest* in = ingest_.load();
  if (!in) return std::nullopt;
  if (in->all_ended()) return "end of acquisition";
  if (in->any_ended()) {
    if (!first_end_at_) first_end_at_ = now;
    else if (now - *first_end_at_ >= part_timeout_)
      return "end of acquisition (not on every port)";
  }
  return std::nullopt;
}

SourceStats FrameSource::stats() const {
  SourceStats s;
  if (Ingest* in = ingest_.load()) s.ingest = in->counters();
  s.assembler = assembler_.counters();
  return s;
}

}  // namespace glint::pipeline
