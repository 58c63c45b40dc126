#include "glint/modular_finder.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <future>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace glint {

std::string_view to_string(ModuleOrientation o) {
  switch (o) {
    case ModuleOrientation::normal: return "normal";
    case ModuleOrientation::flip_rows: return "flip_rows";
    case ModuleOrientation::flip_cols: return "flip_cols";
    case ModuleOrientation::rotate_180: return "rotate_180";
  }
  return "unknown";
}

std::optional<ModuleOrientation> parse_module_orientation(std::string_view name) {
  for (auto o : {ModuleOrientation::normal, ModuleOrientation::flip_rows,
                 ModuleOrientation::flip_cols, ModuleOrientation::rotate_180})
    if (to_string(o) == name) return o;
  return std::nullopt;
}

std::vector<ModuleRegion> module_grid(FrameShape image, uint32_t mx, uint32_t my,
                                      std::span<const ModuleOrientation> orientations) {
  if (mx == 0 || my == 0 || image.cols % mx != 0 || image.rows % my != 0)
    throw std::invalid_argument(fmt::format("a grid of {} x {} modules does not divide the {}x{} "
                                            "(rows x cols) image evenly",
                                            mx, my, image.rows, image.cols));
  const std::size_t n = std::size_t{mx} * my;
  if (orientations.size() > 1 && orientations.size() != n)
    throw std::invalid_argument(fmt::format("{} module orientations for {} modules: give one for "
                                            "all modules or one per module",
                                            orientations.size(), n));
  const FrameShape m{image.rows / my, image.cols / mx};
  std::vector<ModuleRegion> out;
  for (uint32_t gy = 0; gy < my; ++gy)
    for (uint32_t gx = 0; gx < mx; ++gx) {
      const ModuleOrientation o = orientations.empty()       ? ModuleOrientation::normal
                                  : orientations.size() == 1 ? orientations[0]
                                                             : orientations[out.size()];
      out.push_back(ModuleRegion{gy * m.rows, gx * m.cols, m, o});
    }
  return out;
}

void orient_window(ModuleOrientation o, int size, std::span<int32_t> values) {
  const auto s = static_cast<std::size_t>(size);
  if (values.size() != s * s) throw std::invalid_argument("orient_window: not S x S values");
  int32_t* v = values.data();
  if (flips_rows(o))
    for (std::size_t y = 0; y < s / 2; ++y)
      std::swap_ranges(v + y * s, v + (y + 1) * s, v + (s - 1 - y) * s);
  if (flips_cols(o))
    for (std::size_t y = 0; y < s; ++y) std::reverse(v + y * s, v + (y + 1) * s);
}

namespace {

/// Copies the region's values of each of `planes` image-shaped planes into module-shaped
/// planes (to_module) or back, through the region's orientation (`oriented`; raw frames hold
/// each module natively and are copied as they are).
template <class T>
void copy_planes(FrameShape image, const ModuleRegion& r, std::size_t planes, const T* from,
                 T* to, bool to_module, bool oriented = true) {
  const std::size_t ip = image.pixels(), mp = r.shape.pixels();
  const ModuleOrientation o = oriented ? r.orientation : ModuleOrientation::normal;
  for (std::size_t p = 0; p < planes; ++p)
    for (uint32_t y = 0; y < r.shape.rows; ++y) {
      // Native row y is image row image_y(y); a row mirrored left-right is copied reversed.
      const uint32_t iy = flips_rows(o) ? r.row0 + r.shape.rows - 1 - y : r.row0 + y;
      const std::size_t mi = p * mp + std::size_t{y} * r.shape.cols;
      const std::size_t ii = p * ip + std::size_t{iy} * image.cols + r.col0;
      if (flips_cols(o)) {
        if (to_module) std::reverse_copy(from + ii, from + ii + r.shape.cols, to + mi);
        else std::reverse_copy(from + mi, from + mi + r.shape.cols, to + ii);
      } else {
        if (to_module) std::copy_n(from + ii, r.shape.cols, to + mi);
        else std::copy_n(from + mi, r.shape.cols, to + ii);
      }
    }
}

void check_inside(FrameShape image, const ModuleRegion& r) {
  if (r.shape.pixels() == 0 || r.row0 + uint64_t{r.shape.rows} > image.rows ||
      r.col0 + uint64_t{r.shape.cols} > image.cols)
    throw std::invalid_argument(fmt::format("module {}x{} at ({}, {}) is not inside the {}x{} image",
                                            r.shape.rows, r.shape.cols, r.row0, r.col0,
                                            image.rows, image.cols));
}

/// Checks that module `r` lies in `image` and that both sides hold `planes` planes (`what`
/// names the caller in the message).
void check_planes(FrameShape image, const ModuleRegion& r, std::size_t planes,
                  std::size_t module_values, std::size_t image_values, const char* what) {
  check_inside(image, r);
  if (module_values < planes * r.shape.pixels() || image_values < planes * image.pixels())
    throw std::invalid_argument(std::string(what) + ": fewer values than the planes need");
}

}  // namespace

void extract_module(FrameShape image, const ModuleRegion& r, std::span<const uint16_t> images,
                    std::size_t n, std::span<uint16_t> out) {
  check_inside(image, r);
  if (images.size() < n * image.pixels() || out.size() < n * r.shape.pixels())
    throw std::invalid_argument("extract_module: fewer pixels than the frames need");
  copy_planes(image, r, n, images.data(), out.data(), true, false);
}

void place_module_planes(FrameShape image, const ModuleRegion& r, std::size_t planes,
                         std::span<const double> module, std::span<double> image_planes) {
  check_planes(image, r, planes, module.size(), image_planes.size(), "place_module_planes");
  copy_planes(image, r, planes, module.data(), image_planes.data(), false);
}

void extract_module_planes(FrameShape image, const ModuleRegion& r, std::size_t planes,
                           std::span<const double> image_planes, std::span<double> module) {
  check_planes(image, r, planes, module.size(), image_planes.size(), "extract_module_planes");
  copy_planes(image, r, planes, image_planes.data(), module.data(), true);
}

FinderParams module_params(const FinderParams& image, const ModuleRegion& r) {
  check_inside(image.shape, r);
  FinderParams p = image;
  p.shape = r.shape;
  if (image.calibration) {
    const jungfrau::Calibration& c = *image.calibration;
    const std::size_t planes = jungfrau::kStages;
    if (c.gain.size() != planes * image.shape.pixels() ||
        c.pedestal.size() != planes * image.shape.pixels())
      throw std::invalid_argument("module_params: calibration tables not of the image's shape");
    auto m = std::make_shared<jungfrau::Calibration>();
    m->shape = r.shape;
    std::copy(std::begin(c.pedestal_from_dark), std::end(c.pedestal_from_dark),
              std::begin(m->pedestal_from_dark));
    m->gain.resize(planes * r.shape.pixels());
    m->pedestal.resize(planes * r.shape.pixels());
    copy_planes(image.shape, r, planes, c.gain.data(), m->gain.data(), true);
    copy_planes(image.shape, r, planes, c.pedestal.data(), m->pedestal.data(), true);
    p.calibration = std::move(m);
  }
  return p;
}

PedestalState extract_pedestal(const PedestalState& image, const ModuleRegion& r) {
  check_inside(image.shape, r);
  PedestalState m(r.shape, image.window);
  copy_planes(image.shape, r, 1, image.sum.data(), m.sum.data(), true);
  copy_planes(image.shape, r, 1, image.sum2.data(), m.sum2.data(), true);
  copy_planes(image.shape, r, 1, image.count.data(), m.count.data(), true);
  return m;
}

void place_pedestal(const PedestalState& module, const ModuleRegion& r, PedestalState& image) {
  check_inside(image.shape, r);
  if (module.shape != r.shape)
    throw std::invalid_argument("place_pedestal: the pedestal is not of the module's shape");
  copy_planes(image.shape, r, 1, module.sum.data(), image.sum.data(), false);
  copy_planes(image.shape, r, 1, module.sum2.data(), image.sum2.data(), false);
  copy_planes(image.shape, r, 1, module.count.data(), image.count.data(), false);
}

ModularFinder::ModularFinder(const FinderParams& params, std::vector<ModuleRegion> regions,
                             const Factory& make, bool concurrent)
    : params_(params), regions_(std::move(regions)), concurrent_(concurrent),
      merged_(make_result_table(params)) {
  validate(params_);
  if (regions_.empty()) throw std::invalid_argument("a modular finder needs at least one module");
  // The regions tile the image: inside it, not overlapping, covering every pixel.
  std::vector<uint8_t> covered(params_.shape.pixels(), 0);
  for (const ModuleRegion& r : regions_) {
    check_inside(params_.shape, r);
    for (uint32_t y = 0; y < r.shape.rows; ++y) {
      uint8_t* row = covered.data() + std::size_t{r.row0 + y} * params_.shape.cols + r.col0;
      if (std::find(row, row + r.shape.cols, 1) != row + r.shape.cols)
        throw std::invalid_argument("modules overlap");
      std::fill_n(row, r.shape.cols, 1);
    }
  }
  if (std::find(covered.begin(), covered.end(), 0) != covered.end())
    throw std::invalid_argument("the modules do not cover the whole image");
  oriented_ = std::any_of(regions_.begin(), regions_.end(), [](const ModuleRegion& r) {
    return r.orientation != ModuleOrientation::normal;
  });
  for (std::size_t k = 0; k < regions_.size(); ++k) {
    modules_.push_back(make(module_params(params_, regions_[k]), k));
    const int b = modules_.back()->batch_frames();
    if (k > 0 && b != batch_frames_)
      throw std::invalid_argument(fmt::format("modules take batches of {} and {} frames",
                                              batch_frames_, b));
    batch_frames_ = b;
  }
  pending_.resize(modules_.size());
  spare_.resize(modules_.size());
  module_slots_.resize(modules_.size());
  // A delivered table is valid during the call only: it is copied into a table merged before
  // (its vectors keep their capacity), so that batches after the first allocate nothing. Each
  // module's sink touches its own queues only (the modules may deliver at once).
  for (std::size_t k = 0; k < modules_.size(); ++k)
    modules_[k]->set_sink([this, k](const ClusterTable& t) {
      if (spare_[k].empty()) {
        pending_[k].push_back(t);
      } else {
        pending_[k].push_back(std::move(spare_[k].back()));
        spare_[k].pop_back();
        pending_[k].back() = t;
      }
    });
}

ModularFinder::~ModularFinder() {
  for (auto& m : modules_) m->set_sink({});
}

void ModularFinder::each(const std::function<void(std::size_t)>& f) const {
  if (!concurrent_ || modules_.size() == 1) {
    for (std::size_t k = 0; k < modules_.size(); ++k) f(k);
    return;
  }
  std::vector<std::future<void>> runs;
  for (std::size_t k = 1; k < modules_.size(); ++k)
    runs.push_back(std::async(std::launch::async, f, k));
  std::exception_ptr failure;
  try {
    f(0);
  } catch (...) {
    failure = std::current_exception();
  }
  for (auto& r : runs) {
    try {
      r.get();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::size_t ModularFinder::module_of(uint32_t x, uint32_t y) const {
  for (std::size_t k = 0; k < regions_.size(); ++k) {
    const ModuleRegion& r = regions_[k];
    if (x >= r.col0 && x - r.col0 < r.shape.cols && y >= r.row0 && y - r.row0 < r.shape.rows)
      return k;
  }
  throw std::out_of_range(fmt::format("pixel ({}, {}) is in no module", x, y));
}

std::span<const std::span<uint16_t>> ModularFinder::module_staging() {
  for (std::size_t k = 0; k < modules_.size(); ++k) module_slots_[k] = modules_[k]->staging();
  input_ = Input::modules;
  deliver_complete();
  return module_slots_;
}

std::span<uint16_t> ModularFinder::staging() {
  if (image_slot_.empty())
    image_slot_.resize(params_.shape.pixels() * static_cast<std::size_t>(batch_frames_));
  input_ = Input::image;
  return image_slot_;
}

void ModularFinder::scatter_input(std::size_t n) {
  if (n > static_cast<std::size_t>(batch_frames_))
    throw std::invalid_argument(fmt::format("finder: a batch of {} frames exceeds the batch of {}",
                                            n, batch_frames_));
  if (input_ == Input::modules) return;
  if (input_ == Input::none)
    throw std::logic_error("modular finder: submit without staging() or module_staging()");
  for (std::size_t k = 0; k < modules_.size(); ++k)
    extract_module(params_.shape, regions_[k], image_slot_, n, modules_[k]->staging());
}

void ModularFinder::submit(std::span<const uint64_t> frame_numbers) {
  if (frame_numbers.empty()) return;
  scatter_input(frame_numbers.size());
  input_ = Input::none;
  each([&](std::size_t k) { modules_[k]->submit(frame_numbers); });
  deliver_complete();
}

void ModularFinder::submit_dark(std::size_t n) {
  if (n == 0) return;
  scatter_input(n);
  input_ = Input::none;
  each([&](std::size_t k) { modules_[k]->submit_dark(n); });
  deliver_complete();
}

void ModularFinder::flush() {
  each([&](std::size_t k) { modules_[k]->flush(); });
  deliver_complete();
}

void ModularFinder::deliver_complete() {
  std::vector<const ClusterTable*> fronts(modules_.size());
  while (std::all_of(pending_.begin(), pending_.end(), [](const auto& q) { return !q.empty(); })) {
    for (std::size_t k = 0; k < modules_.size(); ++k) fronts[k] = &pending_[k].front();
    merged_.clear();
    merge(fronts, merged_);
    for (std::size_t k = 0; k < modules_.size(); ++k) {
      spare_[k].push_back(std::move(pending_[k].front()));
      pending_[k].pop_front();
    }
    if (sink_) sink_(merged_);
  }
}

void ModularFinder::merge(std::span<const ClusterTable* const> tables, ClusterTable& out) const {
  const std::size_t frames = tables[0]->n_frames();
  std::size_t clusters = 0;
  for (const ClusterTable* t : tables) {
    if (t->n_frames() != frames)
      throw std::logic_error("modular finder: modules returned batches of different frames");
    clusters += t->n_clusters();
  }
  out.reserve(frames, clusters);
  const std::size_t vpc = out.values_per_cluster();
  auto& records = out.frames_mut();
  auto& xs = out.x_mut();
  auto& ys = out.y_mut();
  auto& data = out.data_mut();
  for (std::size_t f = 0; f < frames; ++f) {
    FrameRecord rec{tables[0]->frames()[f].frame_number, xs.size(), 0};
    jungfrau::GainCounts gains;
    for (std::size_t k = 0; k < tables.size(); ++k) {
      const ClusterTable& t = *tables[k];
      const FrameRecord& r = t.frames()[f];
      if (r.frame_number != rec.frame_number)
        throw std::logic_error("modular finder: modules returned different frames");
      const ModuleRegion& m = regions_[k];
      for (std::size_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
        xs.push_back(static_cast<uint16_t>(m.image_x(t.x()[i])));
        ys.push_back(static_cast<uint16_t>(m.image_y(t.y()[i])));
      }
      const auto values = t.data().subspan(r.first_cluster * vpc, std::size_t{r.n_clusters} * vpc);
      const std::size_t at = data.size();
      data.insert(data.end(), values.begin(), values.end());
      if (m.orientation != ModuleOrientation::normal)  // each window as the image shows it
        for (std::size_t i = 0; i < r.n_clusters; ++i)
          orient_window(m.orientation, out.cluster_size(),
                        std::span<int32_t>(data).subspan(at + i * vpc, vpc));
      rec.n_clusters += r.n_clusters;
      if (t.has_gain_counts()) {
        const jungfrau::GainCounts& g = t.gain_counts()[f];
        gains.g1 += g.g1;
        gains.g2 += g.g2;
        gains.invalid += g.invalid;
      }
    }
    records.push_back(rec);
    if (out.has_gain_counts()) out.gain_counts_mut().push_back(gains);
  }
}

void ModularFinder::push_dark(std::span<const uint16_t> frames) {
  const std::size_t n = check_dark_frames(params_, frames);
  each([&](std::size_t k) {
    std::vector<uint16_t> mine(n * regions_[k].shape.pixels());
    extract_module(params_.shape, regions_[k], frames, n, mine);
    modules_[k]->push_dark(mine);
  });
  deliver_complete();
}

void ModularFinder::find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
                         ClusterTable& out) {
  check_find_arguments(params_, frames, frame_numbers, out);
  const std::size_t n = frame_numbers.size();
  std::vector<ClusterTable> found;
  for (std::size_t k = 0; k < modules_.size(); ++k)
    found.push_back(make_result_table(modules_[k]->params()));
  each([&](std::size_t k) {
    std::vector<uint16_t> mine(n * regions_[k].shape.pixels());
    extract_module(params_.shape, regions_[k], frames, n, mine);
    modules_[k]->find(mine, frame_numbers, found[k]);
  });
  deliver_complete();  // batches streamed before, which the modules delivered first
  std::vector<const ClusterTable*> tables;
  for (const ClusterTable& t : found) tables.push_back(&t);
  merge(tables, out);
}

PedestalState ModularFinder::pedestal() const {
  std::vector<PedestalState> parts(modules_.size());
  each([&](std::size_t k) { parts[k] = modules_[k]->pedestal(); });
  PedestalState image(params_.shape, parts[0].window);
  for (std::size_t k = 0; k < modules_.size(); ++k) place_pedestal(parts[k], regions_[k], image);
  return image;
}

void ModularFinder::load_pedestal(const PedestalState& state) {
  if (state.shape != params_.shape)
    throw std::invalid_argument(fmt::format("a pedestal of {}x{} pixels, the detector is {}x{}",
                                            state.shape.rows, state.shape.cols,
                                            params_.shape.rows, params_.shape.cols));
  each([&](std::size_t k) { modules_[k]->load_pedestal(extract_pedestal(state, regions_[k])); });
}

std::vector<double> ModularFinder::calibration_pedestal() const {
  std::vector<std::vector<double>> parts(modules_.size());
  each([&](std::size_t k) { parts[k] = modules_[k]->calibration_pedestal(); });
  if (parts[0].empty()) return {};
  const std::size_t planes = jungfrau::kStages;
  std::vector<double> image(planes * params_.shape.pixels(), 0.0);
  for (std::size_t k = 0; k < modules_.size(); ++k)
    place_module_planes(params_.shape, regions_[k], planes, parts[k], image);
  return image;
}

std::string ModularFinder::description() const {
  std::vector<std::string> names;
  for (const auto& m : modules_) {
    std::string d = m->description();
    if (std::find(names.begin(), names.end(), d) == names.end()) names.push_back(std::move(d));
  }
  return fmt::format("{} module{}: {}", modules_.size(), modules_.size() == 1 ? "" : "s",
                     fmt::join(names, ", "));
}

std::unique_ptr<ClusterFinder> make_modular_finder(const FinderParams& params,
                                                   std::vector<ModuleRegion> regions,
                                                   const ModularFinder::Factory& make,
                                                   bool concurrent) {
  if (regions.size() == 1 && regions[0] == ModuleRegion{0, 0, params.shape})
    return make(params, 0);
  return std::make_unique<ModularFinder>(params, std::move(regions), make, concurrent);
}

}  // namespace glint
