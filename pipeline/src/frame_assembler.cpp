#include "glint/pipeline/frame_assembler.hpp"

#include <algorithm>
#include <stdexcept>

#include "glint/log.hpp"

namespace glint::pipeline {

FrameAssembler::FrameAssembler(const config::DetectorConfig& detector,
                               const config::IngestConfig& ingest)
    : det_(detector),
      reorder_frames_(ingest.reorder_frames),
      part_timeout_(ingest.part_timeout_ms),
      n_parts_(detector.n_ports()),
      port_last_frame_(detector.n_ports()),
      port_last_at_(detector.n_ports()) {
  // All buffers are allocated here, at run start; nothing is allocated per frame.
  free_.reserve(ingest.queue_frames);
  for (uint32_t i = 0; i < ingest.queue_frames; ++i) {
    auto f = std::make_unique<AssembledFrame>();
    f->part.resize(n_parts_);
    free_.push_back(std::move(f));
  }
  c_.pool = free_.size();
}

void FrameAssembler::remember_dropped_locked(uint64_t fn) {
  dropped_.insert(fn);
  dropped_recent_.insert(fn);
  while (dropped_recent_.size() > 4096) dropped_recent_.erase(dropped_recent_.begin());
}

void AssembledFrame::write_to(const config::DetectorConfig& det, std::span<uint16_t> out,
                              bool streaming) const {
  write_region(det, ModuleRegion{0, 0, {det.rows, det.cols}}, out, streaming);
}

void AssembledFrame::write_region(const config::DetectorConfig& det, const ModuleRegion& region,
                                  std::span<uint16_t> out, bool streaming) const {
  const uint32_t prow = det.port_rows(), pcol = det.port_cols();
  if (region.row0 % prow != 0 || region.col0 % pcol != 0 || region.shape.rows % prow != 0 ||
      region.shape.cols % pcol != 0 || out.size() < region.shape.pixels())
    throw std::invalid_argument("write_region: not a block of whole ports, or too little room");
  for (uint32_t p = 0; p < part.size(); ++p) {
    const uint32_t py = p / det.ports_x * prow, px = p % det.ports_x * pcol;
    if (py < region.row0 || py >= region.row0 + region.shape.rows || px < region.col0 ||
        px >= region.col0 + region.shape.cols)
      continue;  // another module's port
    const std::size_t y0 = py - region.row0, x0 = px - region.col0;
    const PartPayload& pp = part[p];
    if (pcol == region.shape.cols && !pp.rows_flipped && !pp.bytes.empty()) {
      // The port's rows are whole rows of the block: one run of pixels.
      decode_row(pp.bitmode, pp.bytes.data(), 0, std::size_t{prow} * pcol,
                 out.data() + y0 * region.shape.cols, streaming);
      continue;
    }
    for (uint32_t r = 0; r < prow; ++r) {
      uint16_t* dst = out.data() + (y0 + r) * region.shape.cols + x0;
      // A flipped part's first row on the wire is the block's last (as the sls consumer does).
      const uint32_t src_row = pp.rows_flipped ? prow - 1 - r : r;
      if (pp.bytes.empty()) std::fill_n(dst, pcol, uint16_t{0});
      else decode_row(pp.bitmode, pp.bytes.data(), std::size_t{src_row} * pcol, pcol, dst, streaming);
    }
  }
}

void FrameAssembler::add_part(const SlsHeader& h, PartPayload payload) {
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const uint64_t fn = h.frame_number;
  const uint32_t part = h.row * det_.ports_x + h.column;
  port_last_frame_[part] = fn;
  port_last_at_[part] = now;
  auto late = [&](const char* why) {
    const uint64_t n = ++c_.late_parts;
    if (n != 1 && now - late_logged_ < std::chrono::seconds(10)) return;
    const uint64_t since = n - late_logged_count_;
    late_logged_ = now;
    late_logged_count_ = n;
    lock.unlock();
    log::warn("frame {}, port (row {}, column {}): late part ({}), not used; {} late part(s) "
              "since the last report, {} in all (logged at most every 10 s)",
              fn, h.row, h.column, why, since, n);
  };
  if (last_emitted_ && fn <= *last_emitted_) return late("its image was already emitted");
  if (dropped_recent_.contains(fn)) return late("its image was dropped");
  auto it = pending_.find(fn);
  if (it == pending_.end()) {
    if (free_.empty()) {
      // No buffer: drop the frame here instead of blocking the socket.
      ++c_.frames_dropped;
      remember_dropped_locked(fn);
      return;
    }
    FramePtr f = std::move(free_.back());
    free_.pop_back();
    f->frame_number = fn;
    f->timestamp = h.timestamp;
    f->incomplete = false;
    f->dark_marked = false;
    f->parts = 0;
    f->first_part_at = now;
    it = pending_.emplace(fn, std::move(f)).first;
  }
  AssembledFrame& f = *it->second;
  if (!f.part[part].bytes.empty()) return late("a second copy; the first is kept");
  f.part[part] = std::move(payload);
  f.part[part].bitmode = h.bitmode;
  f.part[part].rows_flipped = h.rows_flipped();
  ++f.parts;
  if (h.complete_image == 0) f.incomplete = true;
  if (h.marked_dark()) f.dark_marked = true;
  ++c_.parts;
  emit_ready_locked(now, false);
  lock.unlock();
  cv_.notify_one();
}

void FrameAssembler::emit_ready_locked(std::chrono::steady_clock::time_point now, bool flush_all) {
  while (!pending_.empty()) {
    auto first = pending_.begin();
    AssembledFrame& f = *first->second;
    const bool complete = f.parts == n_parts_;
    const bool overdue = pending_.size() > reorder_frames_ || now >= give_up_at_locked(f);
    if (!complete && !overdue && !flush_all) break;
    if (!complete) f.incomplete = true;
    if (f.incomplete) ++c_.frames_incomplete;
    else ++c_.frames_complete;
    last_emitted_ = first->first;
    ready_.push_back(std::move(first->second));
    pending_.erase(first);
  }
}

std::chrono::steady_clock::time_point FrameAssembler::give_up_at_locked(
    const AssembledFrame& f) const {
  using clock = std::chrono::steady_clock;
  clock::time_point at = clock::time_point::min();
  for (uint32_t p = 0; p < n_parts_; ++p) {
    if (!f.part[p].bytes.empty()) continue;
    const auto& last = port_last_frame_[p];
    if (last && *last > f.frame_number) continue;  // the port has moved past: its part is lost
    const clock::time_point stalled =
        last ? std::max(f.first_part_at, port_last_at_[p]) + part_timeout_
             : f.first_part_at + kAbsentPortTimeouts * part_timeout_;
    at = std::max(at, stalled);
  }
  return at;
}

FramePtr FrameAssembler::pop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ready_.empty()) {
    emit_ready_locked(std::chrono::steady_clock::now(), false);
    if (!ready_.empty() || woken_) break;
    // Wake at the deadline or when the oldest pending image becomes overdue (a new part
    // notifies).
    auto until = deadline;
    if (!pending_.empty()) until = std::min(until, give_up_at_locked(*pending_.begin()->second));
    if (cv_.wait_until(lock, until) == std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= deadline) {
      emit_ready_locked(std::chrono::steady_clock::now(), false);
      break;
    }
  }
  if (ready_.empty()) {
    woken_ = false;  // kept while images are returned: the wake is for the moment the queue is empty
    return nullptr;
  }
  FramePtr f = std::move(ready_.front());
  ready_.pop_front();
  return f;
}

void FrameAssembler::release(FramePtr frame) {
  if (!frame) return;
  for (auto& p : frame->part) p = PartPayload{};  // gives the messages back, outside the lock
  std::lock_guard lock(mu_);
  free_.push_back(std::move(frame));
}

void FrameAssembler::flush_pending() {
  {
    std::lock_guard lock(mu_);
    emit_ready_locked(std::chrono::steady_clock::now(), true);
  }
  cv_.notify_all();
}

void FrameAssembler::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

std::vector<uint64_t> FrameAssembler::take_dropped(std::optional<uint64_t> limit) {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  auto end = limit ? dropped_.lower_bound(*limit) : dropped_.end();
  out.assign(dropped_.begin(), end);
  dropped_.erase(dropped_.begin(), end);
  return out;
}

AssemblerCounters FrameAssembler::counters() const {
  std::lock_guard lock(mu_);
  AssemblerCounters c = c_;
  c.pending = pending_.size();
  c.ready = ready_.size();
  c.free = free_.size();
  return c;
}

}  // namespace glint::pipeline
