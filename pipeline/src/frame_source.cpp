#include "glint/pipeline/frame_source.hpp"

#include <algorithm>

namespace glint::pipeline {

namespace {

/// The counters of `now` since `base` (a shared ingest counts across runs).
IngestCounters since(const IngestCounters& now, const IngestCounters& base) {
  IngestCounters c = now;
  c.messages -= base.messages;
  c.bytes -= base.bytes;
  c.end_messages -= base.end_messages;
  c.restarts -= base.restarts;
  c.frames_outside_run -= std::min(base.frames_outside_run, now.frames_outside_run);
  for (std::size_t k = 0; k < kBadInputKinds; ++k) c.bad[k] -= base.bad[k];
  return c;
}

}  // namespace

FrameSource::FrameSource(const config::Config& cfg, std::shared_ptr<Ingest> shared)
    : part_timeout_(cfg.ingest.part_timeout_ms), cfg_(cfg),
      assembler_(cfg.detector, cfg.ingest), shared_(std::move(shared)) {}

FrameSource::~FrameSource() { stop(); }

void FrameSource::connect() {
  if (shared_) {
    {
      std::lock_guard lock(counters_mu_);
      base_ = shared_->counters();
    }
    shared_->attach(assembler_);
    ingest_.store(shared_.get());
    return;
  }
  ingest_owner_ = std::make_unique<Ingest>(cfg_, assembler_);
  ingest_.store(ingest_owner_.get());
}

void FrameSource::stop_input() {
  stop();
  assembler_.flush_pending();
}

void FrameSource::stop() {
  Ingest* in = ingest_.load();
  if (!in) return;
  if (shared_) in->detach();
  else in->stop();
  std::lock_guard lock(counters_mu_);
  if (!final_) final_ = since(in->counters(), base_);
}

std::optional<std::string> FrameSource::ended(std::chrono::steady_clock::time_point now) {
  Ingest* in = ingest_.load();
  if (!in) return std::nullopt;
  if (in->all_ended()) return in->restarted() ? "detector restart" : "end of acquisition";
  if (in->any_ended()) {
    // The ports that have not ended may be behind the others (ports out of step): the run waits
    // while they still deliver.
    if (!first_end_at_) first_end_at_ = now;
    else if (now - std::max(*first_end_at_, in->last_delivery()) >= part_timeout_)
      return in->restarted() ? "detector restart (not on every port)"
                             : "end of acquisition (not on every port)";
  }
  return std::nullopt;
}

SourceStats FrameSource::stats() const {
  SourceStats s;
  {
    std::lock_guard lock(counters_mu_);
    if (final_) s.ingest = *final_;
    else if (Ingest* in = ingest_.load()) s.ingest = since(in->counters(), base_);
  }
  s.assembler = assembler_.counters();
  return s;
}

}  // namespace glint::pipeline
