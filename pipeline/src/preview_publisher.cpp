#include "glint/pipeline/preview_publisher.hpp"

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "glint/log.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace glint::pipeline {

namespace {

constexpr double kMaxPixel = 4294967295.0;  // 2^32 - 1
constexpr int kFinestScaleExponent = -6;

std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

ScaledPixels scale_to_uint32(const PreviewImage& image) {
  ScaledPixels out;
  out.pixels.assign(image.values.size(), 0);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool integral = true;
  for (double v : image.values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    integral = integral && v == std::floor(v);
  }
  if (lo > hi) {  // nothing finite
    out.non_finite = image.values.size();
    return out;
  }
  out.offset = lo < 0 ? lo : 0.0;
  const double range = hi - out.offset;
  if (!(integral && range <= kMaxPixel)) {
    // The smallest power of ten that fits the range: range / scale <= 2^32 - 1.
    int e = range > 0 ? static_cast<int>(std::ceil(std::log10(range / kMaxPixel))) : 0;
    e = std::max(e, kFinestScaleExponent);
    double scale = std::pow(10.0, e);
    if (range / scale > kMaxPixel) scale *= 10;  // log10's rounding at an exact power
    out.scale = scale;
  }
  for (std::size_t i = 0; i < image.values.size(); ++i) {
    const double v = image.values[i];
    if (!std::isfinite(v)) {
      ++out.non_finite;
      continue;
    }
    const double p = std::round((v - out.offset) / out.scale);
    out.pixels[i] = static_cast<uint32_t>(std::clamp(p, 0.0, kMaxPixel));
  }
  return out;
}

std::vector<std::string> encode_preview_update(const PreviewUpdate& update) {
  std::vector<std::string> parts;
  parts.reserve(1 + 2 * update.images.size());
  nlohmann::json naming = {{"glint_preview", kPreviewFormatVersion},
                           {"run", update.run_index},
                           {"file", update.file},
                           {"update", update.sequence},
                           {"final", update.final},
                           {"frames", update.frames},
                           {"images", nlohmann::json::array()}};
  parts.emplace_back();  // the naming message, once the scales are known
  for (const auto& image_ptr : update.images) {
    const PreviewImage& image = *image_ptr;
    const ScaledPixels px = scale_to_uint32(image);
    nlohmann::json entry = {{"what", image.what},         {"units", image.units},
                            {"rows", image.rows},         {"cols", image.cols},
                            {"scale", px.scale},          {"offset", px.offset},
                            {"frames", image.frames},     {"non_finite", px.non_finite}};
    if (!image.x_label.empty()) {
      entry["x_min"] = image.x_min;
      entry["x_max"] = image.x_max;
      entry["x_label"] = image.x_label;
    }
    naming["images"].push_back(std::move(entry));

    SlsHeader h;
    h.jsonversion = 5;
    h.bitmode = 32;
    h.file_index = update.run_index;
    h.detshape = {1, 1};
    h.shape = {image.cols, image.rows};
    h.size = payload_bytes(32, px.pixels.size());
    h.acq_index = update.run_index;
    h.frame_index = update.sequence;
    h.progress = update.final ? 100.0 : 0.0;
    h.fname = update.file;
    h.data = 1;
    h.complete_image = 1;
    h.frame_number = update.sequence + 1;  // slsReceiver's frame numbers start at 1
    h.add_json_header = {{"glint_what", image.what},
                         {"units", image.units},
                         {"scale", number(px.scale)},
                         {"offset", number(px.offset)},
                         {"frames", std::to_string(image.frames)}};
    if (!image.x_label.empty()) {
      h.add_json_header["x_min"] = number(image.x_min);
      h.add_json_header["x_max"] = number(image.x_max);
      h.add_json_header["x_label"] = image.x_label;
    }
    parts.push_back(format_sls_header(h));
    std::string pixels(px.pixels.size() * sizeof(uint32_t), '\0');
    static_assert(std::endian::native == std::endian::little, "the stream is little-endian");
    if (!pixels.empty()) std::memcpy(pixels.data(), px.pixels.data(), pixels.size());
    parts.push_back(std::move(pixels));
  }
  parts[0] = naming.dump();
  return parts;
}

std::vector<PreviewImage> pedestal_images(const PedestalState& pedestal,
                                          const std::string& units) {
  std::vector<PreviewImage> out(2);
  out[0].what = "pedestal";
  out[0].values = pedestal.means();
  out[1].what = "noise";
  out[1].values = pedestal.noises();
  for (auto& image : out) {
    image.units = units;
    image.rows = pedestal.shape.rows;
    image.cols = pedestal.shape.cols;
    image.frames = pedestal.count.empty() ? 0 : pedestal.min_count();
  }
  return out;
}

// ---- PreviewPublisher ----

struct PreviewPublisher::Socket {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
};

PreviewPublisher::PreviewPublisher(const std::string& endpoint, int hwm)
    : socket_(std::make_unique<Socket>()), hwm_(hwm) {
  socket_->pub.set(zmq::sockopt::linger, 0);
  socket_->pub.set(zmq::sockopt::sndhwm, hwm * kPreviewMessagesPerUpdate);
  try {
    socket_->pub.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "preview.endpoint {}: cannot bind the live view's socket: {} (choose a free port, "
        "tcp://HOST:* for any, or set preview.enabled: false)",
        endpoint, e.what()));
  }
  endpoint_ = socket_->pub.get(zmq::sockopt::last_endpoint);
  thread_ = std::jthread([this](std::stop_token st) { send_loop(st); });
}

PreviewPublisher::~PreviewPublisher() {
  thread_.request_stop();
  { std::lock_guard lock(mu_); }  // the sender is waiting, or will see the stop request
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PreviewPublisher::publish(PreviewUpdate update) {
  bool replaced = false;
  {
    std::lock_guard lock(mu_);
    replaced = mailbox_.has_value();
    mailbox_ = std::move(update);
  }
  if (replaced) replaced_.fetch_add(1);
  cv_.notify_all();
  return !replaced;
}

bool PreviewPublisher::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return !mailbox_ && !sending_; });
}

PreviewPublisherStats PreviewPublisher::stats() const {
  return {sent_.load(), replaced_.load(), refused_.load()};
}

void PreviewPublisher::send_loop(std::stop_token st) {
  pthread_setname_np(pthread_self(), "glint-preview");
  std::unique_lock lock(mu_);
  while (!st.stop_requested()) {
    cv_.wait(lock, [&] { return mailbox_.has_value() || st.stop_requested(); });
    if (st.stop_requested()) break;
    PreviewUpdate update = std::move(*mailbox_);
    mailbox_.reset();
    sending_ = true;
    lock.unlock();
    bool whole = false;
    try {
      const std::vector<std::string> parts = encode_preview_update(update);
      auto send = [&](const std::string& bytes, bool more) {
        zmq::send_flags flags = zmq::send_flags::dontwait;
        if (more) flags = flags | zmq::send_flags::sndmore;
        return socket_->pub.send(zmq::const_buffer(bytes.data(), bytes.size()), flags)
            .has_value();
      };
      // A PUB socket does not refuse (it drops past a subscriber's high-water mark), but a
      // refusal would leave the rest of the update unsent: it is counted.
      whole = send(parts[0], false);
      for (std::size_t i = 1; whole && i + 1 < parts.size(); i += 2)
        whole = send(parts[i], true) && send(parts[i + 1], false);
    } catch (const std::exception& e) {
      log::warn("live view: update {} of run {} not sent: {}", update.sequence, update.run_index,
                e.what());
    }
    (whole ? sent_ : refused_).fetch_add(1);
    lock.lock();
    sending_ = false;
    cv_.notify_all();
  }
}

// ---- PreviewConsumer ----

PreviewConsumer::PreviewConsumer(std::shared_ptr<PreviewPublisher> publisher,
                                 PreviewProvider provider)
    : publisher_(std::move(publisher)), provider_(std::move(provider)) {}

void PreviewConsumer::on_start(const RunContext& run) {
  cfg_ = run.cfg.preview;
  run_index_ = run.run_index;
  file_ = run.file.string();
  pedestal_units_ = run.cfg.calibration.calibrated() ? run.cfg.calibration.units : "ADU";
  interval_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / cfg_.rate_hz));
  refused_at_start_.store(publisher_->stats().updates_refused);
}

void PreviewConsumer::on_pedestal(const PedestalState& pedestal) {
  pedestal_.clear();
  for (auto& image : pedestal_images(pedestal, pedestal_units_))
    if (cfg_.sends(image.what))
      pedestal_.push_back(std::make_shared<const PreviewImage>(std::move(image)));
  maybe_publish(false, false);  // the maps as soon as they are known
}

void PreviewConsumer::on_batch(const FoundBatch& batch) {
  const uint64_t n = batch.clusters.frames().size();
  frames_.fetch_add(n);
  data_frames_.fetch_add(n);
  maybe_publish(false, false);
}

void PreviewConsumer::on_rows(std::span<const FrameRow> rows) { frames_.fetch_add(rows.size()); }

void PreviewConsumer::on_end(const RunEnd& end) {
  if (!end.failed) maybe_publish(true, true);
}

void PreviewConsumer::maybe_publish(bool force, bool final) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && last_ && now - *last_ < interval_) return;
  last_ = now;
  PreviewUpdate u;
  u.run_index = run_index_;
  u.file = file_;
  u.sequence = updates_.load();
  u.final = final;
  u.frames = data_frames_.load();
  if (provider_) {
    try {
      for (auto& image : provider_())
        if (cfg_.sends(image.what))
          u.images.push_back(std::make_shared<const PreviewImage>(std::move(image)));
    } catch (const std::exception& e) {
      failed_.fetch_add(1);
      log::warn("live view: run {}: the images could not be made: {}", run_index_, e.what());
      return;
    }
  }
  u.images.insert(u.images.end(), pedestal_.begin(), pedestal_.end());
  updates_.fetch_add(1);
  if (!publisher_->publish(std::move(u))) dropped_.fetch_add(1);
}

ConsumerStats PreviewConsumer::stats() const {
  ConsumerStats s;
  s.name = std::string(name());
  s.frames = frames_.load();
  s.dropped = dropped_.load() + (publisher_->stats().updates_refused - refused_at_start_.load());
  s.failed = failed_.load();
  return s;
}

}  // namespace glint::pipeline
