#pragma once
// A detector of several modules (docs/modules.md): each module is a block of the image with its
// own pedestal and its own finder, so each module's clusters are exactly those of that module's
// image found alone. ModularFinder is one ClusterFinder over the whole image made of one finder
// per module (any backend, on any device): its results are the modules' clusters in image
// coordinates, frame by frame, module by module within a frame (in the module's own raster
// order), and its pedestal is the modules' pedestals in their places.
//
// A module may be mounted flipped (ModuleOrientation). Its finder always reads the module's
// native pixels, in the order its ports deliver them; the image shows the module flipped in its
// block. So frames as assembled from the ports ("raw" below: each module's native block at its
// place) go to the modules as they are, while everything image-shaped (clusters' coordinates and
// values, pedestals, calibration tables, masks) passes through the module's orientation.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glint/cluster_finder.hpp"

namespace glint {

/// How a module is mounted: how its block of the image shows its native pixels (rows and
/// columns as its ports read them out). Flips only, so the block keeps the module's shape.
/// flip_rows: upside down (image row r of the block is native row rows-1-r; PSI's Jungfraujoch
/// calls it mirroring in y); flip_cols: mirrored left-right; rotate_180: both.
enum class ModuleOrientation : uint8_t { normal, flip_rows, flip_cols, rotate_180 };

/// "normal", "flip_rows", "flip_cols", "rotate_180".
std::string_view to_string(ModuleOrientation o);
/// The orientation of that name; nullopt for any other.
std::optional<ModuleOrientation> parse_module_orientation(std::string_view name);
/// The names, in the enum's order (for messages).
inline constexpr std::string_view kModuleOrientations = "normal, flip_rows, flip_cols, rotate_180";
constexpr bool flips_rows(ModuleOrientation o) {
  return o == ModuleOrientation::flip_rows || o == ModuleOrientation::rotate_180;
}
constexpr bool flips_cols(ModuleOrientation o) {
  return o == ModuleOrientation::flip_cols || o == ModuleOrientation::rotate_180;
}

/// One module: the block of `shape` at (row0, col0) of the image, showing the module's native
/// pixels as `orientation` says.
struct ModuleRegion {
  uint32_t row0 = 0;
  uint32_t col0 = 0;
  FrameShape shape{};
  ModuleOrientation orientation = ModuleOrientation::normal;
  /// Image column of native column x of the module (x < shape.cols), and image row of native
  /// row y; the same functions map image-local coordinates back (a flip is its own inverse).
  uint32_t image_x(uint32_t x) const {
    return col0 + (flips_cols(orientation) ? shape.cols - 1 - x : x);
  }
  uint32_t image_y(uint32_t y) const {
    return row0 + (flips_rows(orientation) ? shape.rows - 1 - y : y);
  }
  /// Native column of image column x (inside the block), and native row of image row y.
  uint32_t native_x(uint32_t x) const {
    return flips_cols(orientation) ? shape.cols - 1 - (x - col0) : x - col0;
  }
  uint32_t native_y(uint32_t y) const {
    return flips_rows(orientation) ? shape.rows - 1 - (y - row0) : y - row0;
  }
  friend bool operator==(const ModuleRegion&, const ModuleRegion&) = default;
};

/// The modules of a grid of `mx` x `my` equal blocks over `image`, row-major (module k is
/// grid column k % mx, row k / mx). `orientations`: none (all normal), one for all modules, or
/// one per module. Throws std::invalid_argument when the blocks do not divide the image or the
/// orientations are neither.
std::vector<ModuleRegion> module_grid(FrameShape image, uint32_t mx, uint32_t my,
                                      std::span<const ModuleOrientation> orientations = {});

/// Flips an S x S cluster window (row-major, `size` = S) from a module's native orientation to
/// the image's `o`, in place; the same call flips it back.
void orient_window(ModuleOrientation o, int size, std::span<int32_t> values);

/// Copies module `r` of `n` raw images (image-shaped, back to back in `images`: each module's
/// native block at its place, as assembled from the ports) into `out` (module-shaped, back to
/// back): the module's native frames, whatever its orientation.
void extract_module(FrameShape image, const ModuleRegion& r, std::span<const uint16_t> images,
                    std::size_t n, std::span<uint16_t> out);

/// The finder parameters of module `r` of an image with `image` parameters (its shape, its part
/// of the JUNGFRAU calibration tables, which are image-shaped: taken through the orientation).
FinderParams module_params(const FinderParams& image, const ModuleRegion& r);

/// Places `planes` module-shaped planes (back to back in `module`, native) into the image-shaped
/// planes of `image` (back to back) at module `r`, oriented.
void place_module_planes(FrameShape image, const ModuleRegion& r, std::size_t planes,
                         std::span<const double> module, std::span<double> image_planes);
/// The reverse: module `r`'s native planes out of image-shaped ones.
void extract_module_planes(FrameShape image, const ModuleRegion& r, std::size_t planes,
                           std::span<const double> image_planes, std::span<double> module);

/// Module `r`'s part of an image's pedestal (native), and back (oriented in the image).
PedestalState extract_pedestal(const PedestalState& image, const ModuleRegion& r);
void place_pedestal(const PedestalState& module, const ModuleRegion& r, PedestalState& image);

class ModularFinder final : public ClusterFinder {
 public:
  /// Makes the finder of module `index` with `params` (the module's).
  using Factory =
      std::function<std::unique_ptr<ClusterFinder>(const FinderParams& params, std::size_t index)>;

  /// `concurrent`: the modules' calls run on threads of their own at once (backends that
  /// complete each batch inside submit, such as the CPU backend); otherwise one after the other
  /// (the GPU engine returns at once). Throws std::invalid_argument when the regions do not
  /// tile the image or the modules' batch sizes differ.
  ModularFinder(const FinderParams& params, std::vector<ModuleRegion> regions,
                const Factory& make, bool concurrent);
  ~ModularFinder() override;

  std::span<const ModuleRegion> regions() const { return regions_; }
  std::size_t modules() const { return modules_.size(); }
  ClusterFinder& module(std::size_t k) { return *modules_[k]; }
  /// The module whose block holds pixel (x, y) of the image.
  std::size_t module_of(uint32_t x, uint32_t y) const;
  /// Whether any module is not mounted normal.
  bool oriented() const { return oriented_; }

  /// The next batch's input slot as one slot per module (module-shaped frames back to back, room
  /// for batch_frames()): for a caller that writes each module's pixels where its finder reads
  /// them (the run's copy threads), instead of staging(). Then submit or submit_dark as usual.
  std::span<const std::span<uint16_t>> module_staging();

  const FinderParams& params() const override { return params_; }
  bool staging_read_by_device() const override {
    return modules_.front()->staging_read_by_device();
  }
  int batch_frames() const override { return batch_frames_; }
  /// An image-shaped slot of raw frames: submit copies each module's block into its finder's
  /// slot. (push_dark and find take raw frames as well.)
  std::span<uint16_t> staging() override;
  void submit(std::span<const uint64_t> frame_numbers) override;
  void submit_dark(std::size_t n) override;
  void flush() override;
  void set_sink(ResultSink sink) override { sink_ = std::move(sink); }
  void push_dark(std::span<const uint16_t> frames) override;
  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override;
  PedestalState pedestal() const override;
  void load_pedestal(const PedestalState& state) override;
  std::vector<double> calibration_pedestal() const override;
  /// "2 modules: gpu (NVIDIA H200)", listing each different module finder once.
  std::string description() const override;

 private:
  enum class Input { none, image, modules };
  /// Runs f(k) for every module (at once when concurrent), rethrowing the first failure.
  void each(const std::function<void(std::size_t)>& f) const;
  /// Moves the image slot's first n frames into the modules' slots (image input).
  void scatter_input(std::size_t n);
  /// Hands every batch that all modules have delivered to the sink, merged.
  void deliver_complete();
  /// Appends the modules' tables (one batch each, the same frames) to `out` in image coordinates
  /// and orientation.
  void merge(std::span<const ClusterTable* const> tables, ClusterTable& out) const;

  FinderParams params_;
  std::vector<ModuleRegion> regions_;
  std::vector<std::unique_ptr<ClusterFinder>> modules_;
  bool concurrent_;
  bool oriented_ = false;
  int batch_frames_ = 0;
  Input input_ = Input::none;
  std::vector<uint16_t> image_slot_;
  std::vector<std::span<uint16_t>> module_slots_;
  std::vector<std::deque<ClusterTable>> pending_;  ///< per module: delivered, not yet merged
  std::vector<std::vector<ClusterTable>> spare_;   ///< per module: merged tables to reuse
  ClusterTable merged_;
  ResultSink sink_;
};

/// One finder per module of `regions` made by `make`; a single region covering the image gives
/// make(params, 0) itself (a one-module detector is today's finder, byte for byte).
std::unique_ptr<ClusterFinder> make_modular_finder(const FinderParams& params,
                                                   std::vector<ModuleRegion> regions,
                                                   const ModularFinder::Factory& make,
                                                   bool concurrent);

}  // namespace glint
