#include "glint/pipeline/master_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "glint/hdf5_handle.hpp"

namespace glint::pipeline {
namespace {

namespace fs = std::filesystem;
using Hid = hdf5::Handle;

using detail::hdf5_message;

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }
bool has_link(hid_t loc, const std::string& name) {
  return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0;
}

/// The values of a numeric attribute, or nothing when it cannot be read.
std::optional<std::vector<uint32_t>> u32_attr(hid_t obj, const char* name) {
  if (!has_attr(obj, name)) return std::nullopt;
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return std::nullopt;
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return std::nullopt;
  std::vector<uint32_t> v(static_cast<std::size_t>(n));
  if (n > 0 && H5Aread(attr.get(), H5T_NATIVE_UINT32, v.data()) < 0) return std::nullopt;
  return v;
}

std::string string_attr(hid_t obj, const char* name) {
  if (!has_attr(obj, name)) return {};
  Hid attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Hid type = hdf5::string_type();
  char* p = nullptr;
  if (!attr.valid() || H5Aread(attr.get(), type.get(), &p) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return {};
  }
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

/// The dimensions of a dataset, empty when it is missing.
std::vector<hsize_t> dims_of(hid_t loc, const std::string& name) {
  if (!has_link(loc, name)) return {};
  Hid ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) return {};
  Hid space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return {};
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
  return d;
}

/// A dataset's type, class and size (for the virtual dataset that maps it).
struct TypeInfo {
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  bool operator==(const TypeInfo&) const = default;
};

TypeInfo type_of(hid_t loc, const std::string& name) {
  Hid ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) return {};
  Hid t(H5Dget_type(ds.get()), H5Tclose);
  return {H5Tget_class(t.get()), H5Tget_size(t.get())};
}

/// One input, opened and inspected.
struct Input {
  MasterRun run;
  std::string given;  ///< the path as given, for messages
  std::array<uint32_t, 2> detector_shape{};
  bool module_column = false;
  int cluster_size = 0;
  TypeInfo data_type;
  bool energy = false;
  std::string detector_type;
  std::string start_time, end_time;
  Hid file;
};

uint32_t first_module(const Input& in) { return in.run.modules.front().id; }

Input inspect(const fs::path& path, const MasterOptions& options) {
  Input in;
  in.given = path.string();
  in.run.path = path;
  const std::string& name = in.given;
  auto bad = [&](const std::string& why) -> MasterInputError {
    return MasterInputError(name + ": " + why);
  };
  std::error_code ec;
  if (!fs::exists(path, ec)) throw bad("no such file");
  if (!fs::is_regular_file(path, ec)) throw bad("not a regular file");
  if (::access(path.c_str(), R_OK) != 0) throw bad(std::string("cannot be read: ") +
                                                   std::strerror(errno));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw bad("not an HDF5 file (not a glint run file)");
  }
  in.file = hdf5::open_read_only(path.c_str());
  if (!in.file.valid()) throw bad("cannot be opened: " + hdf5_message());
  const hid_t f = in.file.get();
  const char* det_path = "entry/instrument/detector";
  if (!has_link(f, "entry") || !has_link(f, "entry/instrument") || !has_link(f, det_path) ||
      !has_link(f, "entry/clusters") || !has_link(f, "entry/frames"))
    throw bad("not a glint run file (no /entry/instrument/detector, /entry/frames or "
              "/entry/clusters)");
  Hid entry(H5Gopen2(f, "entry", H5P_DEFAULT), H5Gclose);
  Hid det(H5Gopen2(f, det_path, H5P_DEFAULT), H5Gclose);
  if (!entry.valid() || !det.valid()) throw bad("cannot open /entry: " + hdf5_message());
  const auto shape = u32_attr(det.get(), "frame_shape");
  if (!shape || shape->size() != 2)
    throw bad("not a glint run file (/entry/instrument/detector has no frame_shape)");
  in.run.shape = {(*shape)[0], (*shape)[1]};
  in.detector_type = string_attr(det.get(), "detector_type");
  in.start_time = string_attr(entry.get(), "start_time");
  in.end_time = string_attr(entry.get(), "end_time");
  in.run.closed = !in.end_time.empty();
  if (!in.run.closed && !options.allow_open)
    throw bad("the run never closed (no end_time): make the master once the runs have ended, "
              "or pass --allow-open to join the rows written so far");
  // Placement; a file without it is the whole detector, one module id 0 at (0, 0).
  in.detector_shape = {in.run.shape.rows, in.run.shape.cols};
  if (const auto v = u32_attr(det.get(), "detector_shape")) {
    if (v->size() != 2) throw bad("@detector_shape must have two entries");
    in.detector_shape = {(*v)[0], (*v)[1]};
  }
  if (const auto v = u32_attr(det.get(), "detector_origin")) {
    if (v->size() != 2) throw bad("@detector_origin must have two entries");
    in.run.detector_origin = {(*v)[0], (*v)[1]};
  }
  std::vector<std::string> groups;
  H5Literate(
      det.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5L_info_t*, void* data) -> herr_t {
        if (std::string_view(n).starts_with("module_"))
          static_cast<std::vector<std::string>*>(data)->emplace_back(n);
        return 0;
      },
      &groups);
  for (const std::string& g : groups) {
    Hid m(H5Gopen2(det.get(), g.c_str(), H5P_DEFAULT), H5Gclose);
    if (!m.valid() || string_attr(m.get(), "NX_class") != "NXdetector_module") continue;
    ModuleInfo info;
    const auto id = u32_attr(m.get(), "module_id");
    const auto at = u32_attr(m.get(), "detector_origin");
    if (!id || id->size() != 1 || !at || at->size() != 2)
      throw bad("/entry/instrument/detector/" + g + " lacks @module_id or @detector_origin");
    info.id = (*id)[0];
    info.detector_origin = {(*at)[0], (*at)[1]};
    if (has_attr(m.get(), "orientation")) {
      const std::string o = string_attr(m.get(), "orientation");
      const auto parsed = parse_module_orientation(o);
      if (!parsed)
        throw bad(fmt::format("/entry/instrument/detector/{}: @orientation '{}' is none of {}", g,
                              o, kModuleOrientations));
      info.orientation = *parsed;
    }
    for (auto [field, to] : {std::pair{"data_origin", &info.data_origin},
                             std::pair{"data_size", &info.data_size}}) {
      Hid ds(H5Dopen2(m.get(), field, H5P_DEFAULT), H5Dclose);
      std::array<uint32_t, 2> v{};
      if (!ds.valid() || dims_of(m.get(), field) != std::vector<hsize_t>{2} ||
          H5Dread(ds.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
        throw bad("/entry/instrument/detector/" + g + "/" + field + ": two numbers expected");
      *to = v;
    }
    in.run.modules.push_back(info);
  }
  std::sort(in.run.modules.begin(), in.run.modules.end(),
            [](const ModuleInfo& a, const ModuleInfo& b) { return a.id < b.id; });
  if (in.run.modules.empty())
    in.run.modules.push_back(ModuleInfo{0, {0, 0}, {in.run.shape.rows, in.run.shape.cols},
                                        in.run.detector_origin});
  if (uint64_t{in.run.detector_origin[0]} + in.run.shape.rows > in.detector_shape[0] ||
      uint64_t{in.run.detector_origin[1]} + in.run.shape.cols > in.detector_shape[1])
    throw bad(fmt::format("its {} x {} image at ({}, {}) is outside its detector_shape [{}, {}]",
                          in.run.shape.rows, in.run.shape.cols, in.run.detector_origin[0],
                          in.run.detector_origin[1], in.detector_shape[0],
                          in.detector_shape[1]));
  // The cluster rows: the shortest column, at most the flushed rows.
  const auto data = dims_of(f, "entry/clusters/data");
  if (data.size() != 3 || data[1] != data[2])
    throw bad("not a glint run file (/entry/clusters/data is not (n, S, S))");
  in.cluster_size = static_cast<int>(data[1]);
  in.data_type = type_of(f, "entry/clusters/data");
  in.module_column = has_link(f, "entry/clusters/module");
  in.energy = has_link(f, "entry/clusters/energy") && has_link(f, "entry/clusters/energy_2x2");
  uint64_t rows = data[0];
  std::vector<std::string> columns{"frame_number", "x", "y"};
  if (in.module_column) columns.push_back("module");
  if (in.energy) columns.insert(columns.end(), {"energy", "energy_2x2"});
  for (const std::string& c : columns) {
    const auto d = dims_of(f, "entry/clusters/" + c);
    if (d.size() != 1) throw bad("not a glint run file (/entry/clusters/" + c + " missing)");
    rows = std::min<uint64_t>(rows, d[0]);
  }
  if (has_link(f, "entry/flushed_rows")) {
    Hid ds(H5Dopen2(f, "entry/flushed_rows", H5P_DEFAULT), H5Dclose);
    std::array<uint64_t, 2> flushed{};
    if (ds.valid() && dims_of(f, "entry/flushed_rows") == std::vector<hsize_t>{2} &&
        H5Dread(ds.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flushed.data()) >= 0)
      rows = std::min(rows, flushed[1]);
    else
      throw bad("/entry/flushed_rows cannot be read: " + hdf5_message());
  }
  in.run.clusters = rows;
  return in;
}

bool overlap(const std::array<uint32_t, 2>& a, const std::array<uint32_t, 2>& as,
             const std::array<uint32_t, 2>& b, const std::array<uint32_t, 2>& bs) {
  auto apart = [](uint64_t a0, uint64_t an, uint64_t b0, uint64_t bn) {
    return a0 + an <= b0 || b0 + bn <= a0;
  };
  return !apart(a[0], as[0], b[0], bs[0]) && !apart(a[1], as[1], b[1], bs[1]);
}

/// Checks that the inputs are parts of one detector (same shape, disjoint, distinct modules).
void check_joinable(const std::vector<Input>& inputs) {
  const Input& first = inputs.front();
  for (const Input& in : inputs)
    if (in.detector_shape != first.detector_shape)
      throw MasterInputError(fmt::format(
          "{} and {} are parts of different detectors: detector_shape [{}, {}] and [{}, {}]",
          first.given, in.given, first.detector_shape[0], first.detector_shape[1],
          in.detector_shape[0], in.detector_shape[1]));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (std::size_t j = i + 1; j < inputs.size(); ++j) {
      const Input& a = inputs[i];
      const Input& b = inputs[j];
      const std::array<uint32_t, 2> as{a.run.shape.rows, a.run.shape.cols};
      const std::array<uint32_t, 2> bs{b.run.shape.rows, b.run.shape.cols};
      if (overlap(a.run.detector_origin, as, b.run.detector_origin, bs))
        throw MasterInputError(fmt::format(
            "{} and {} overlap: images of {} x {} at ({}, {}) and {} x {} at ({}, {}) in the "
            "detector (a run file without detector.placement is the whole detector at (0, 0))",
            a.given, b.given, as[0], as[1], a.run.detector_origin[0], a.run.detector_origin[1],
            bs[0], bs[1], b.run.detector_origin[0], b.run.detector_origin[1]));
      for (const ModuleInfo& ma : a.run.modules)
        for (const ModuleInfo& mb : b.run.modules)
          if (ma.id == mb.id)
            throw MasterInputError(fmt::format("{} and {} both hold module {}", a.given,
                                               b.given, ma.id));
    }
  for (const Input& in : inputs) {
    if (in.cluster_size != first.cluster_size)
      throw MasterInputError(fmt::format("{} and {} have clusters of {} x {} and {} x {}",
                                         first.given, in.given, first.cluster_size,
                                         first.cluster_size, in.cluster_size, in.cluster_size));
    if (in.data_type != first.data_type)
      throw MasterInputError(fmt::format("{} and {} hold cluster data of different types "
                                         "(ADU int32 and keV float32)", first.given, in.given));
  }
}

/// Names under /entry/runs: the file stems, made unique.
void name_runs(std::vector<Input>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::string name = inputs[i].run.path.stem().string();
    if (name.empty() || name.find('/') != std::string::npos) name = "run";
    std::string unique = name;
    for (int k = 2;; ++k) {
      bool taken = false;
      for (std::size_t j = 0; j < i; ++j) taken = taken || inputs[j].run.name == unique;
      if (!taken) break;
      unique = fmt::format("{}_{}", name, k);
    }
    inputs[i].run.name = unique;
  }
}

struct Writer {
  const fs::path& path;
  Hid file;

  [[noreturn]] void fail(const std::string& what) const {
    throw OutputError(path.string() + ": " + what + ": " + hdf5_message());
  }
  hid_t id(hid_t h, const std::string& what) const {
    if (h < 0) fail(what);
    return h;
  }
  void check(herr_t s, const std::string& what) const {
    if (s < 0) fail(what);
  }
  Hid group(hid_t parent, const char* name, const char* nx_class) const {
    Hid g(id(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             std::string("group ") + name),
          H5Gclose);
    attr(g.get(), "NX_class", nx_class);
    return g;
  }
  void attr(hid_t obj, const char* name, const std::string& value) const {
    if (!hdf5::write_attribute(obj, name, value)) fail(std::string("attribute ") + name);
  }
  template <class T>
  void attr(hid_t obj, const char* name, std::span<const T> values) const {
    if (!hdf5::write_attribute<T>(obj, name, values)) fail(std::string("attribute ") + name);
  }
  void strings_attr(hid_t obj, const char* name, const std::vector<std::string>& values) const {
    Hid type = hdf5::string_type();
    const hsize_t n = values.size();
    Hid space(id(H5Screate_simple(1, &n, nullptr), "dataspace"), H5Sclose);
    Hid a(id(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
             std::string("attribute ") + name),
          H5Aclose);
    std::vector<const char*> p;
    for (const auto& v : values) p.push_back(v.c_str());
    check(H5Awrite(a.get(), type.get(), p.data()), std::string("attribute ") + name);
  }
  template <class T>
  void array(hid_t parent, const char* name, const std::vector<T>& values,
             const char* units = nullptr) const {
    const hsize_t n = values.size();
    Hid space(id(H5Screate_simple(1, &n, nullptr), "dataspace"), H5Sclose);
    Hid ds(id(H5Dcreate2(parent, name, hdf5::native_type<T>(), space.get(), H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT),
              std::string("dataset ") + name),
           H5Dclose);
    check(H5Dwrite(ds.get(), hdf5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                   values.data()),
          std::string("writing ") + name);
    if (units) attr(ds.get(), "units", units);
  }
};

/// The file name a virtual dataset or external link in `output` records for `input`: relative
/// to the master's directory (HDF5 looks there first), so that the files move together.
std::string link_name(const fs::path& input, const fs::path& output) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(fs::absolute(input), ec);
  const fs::path dir = fs::weakly_canonical(fs::absolute(output).parent_path(), ec);
  fs::path rel = in.lexically_relative(dir);
  if (rel.empty()) return in.string();
  return rel.string();
}

/// The type the master's virtual dataset of `source` (a dataset of every input) gets: the
/// first input's.
Hid source_type(const Writer& w, const Input& in, const std::string& source) {
  Hid ds(w.id(H5Dopen2(in.file.get(), source.c_str(), H5P_DEFAULT), in.given + ": " + source),
         H5Dclose);
  Hid t(w.id(H5Dget_type(ds.get()), source), H5Tclose);
  return Hid(w.id(H5Tget_native_type(t.get(), H5T_DIR_ASCEND), source), H5Tclose);
}

/// The fill value for a virtual dataset of `type`: `value` converted.
std::vector<unsigned char> fill_bytes(hid_t type, double value) {
  std::vector<unsigned char> buf(std::max<std::size_t>(H5Tget_size(type), sizeof(double)));
  std::memcpy(buf.data(), &value, sizeof value);
  H5Tconvert(H5T_NATIVE_DOUBLE, type, 1, buf.data(), nullptr, H5P_DEFAULT);
  return buf;
}

/// A detector-shaped virtual dataset `name` in `parent` from each input's image-shaped `source`
/// (its first two dimensions the image times `scale`, any further ones equal), placed at the

/// Maps all of `in`'s dataset `source` (of `sdims`) into the virtual dataset being made
/// (`dcpl`, its dataspace `vspace`) at `start`.
void map_source(const Writer& w, hid_t dcpl, hid_t vspace, const Input& in,
                const std::string& source, const std::vector<hsize_t>& start,
                const std::vector<hsize_t>& sdims) {
  Hid sspace(w.id(H5Screate_simple(static_cast<int>(sdims.size()), sdims.data(), nullptr),
                  "dataspace"),
             H5Sclose);
  w.check(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start.data(), nullptr, sdims.data(),
                              nullptr),
          "selection");
  w.check(H5Pset_virtual(dcpl, vspace, link_name(in.run.path, w.path).c_str(), source.c_str(),
                         sspace.get()),
          std::string("mapping ") + in.given + ":" + source);
}

/// input's detector origin; `fill` where no input maps.
void place_images(const Writer& w, hid_t parent, const char* name, const std::string& source,
                  const std::vector<Input>& inputs, const std::array<uint32_t, 2>& detector,
                  uint32_t scale, double fill) {
  std::vector<hsize_t> dims = dims_of(inputs.front().file.get(), source);
  dims[0] = hsize_t{detector[0]} * scale;
  dims[1] = hsize_t{detector[1]} * scale;
  const int rank = static_cast<int>(dims.size());
  Hid type = source_type(w, inputs.front(), source);
  Hid vspace(w.id(H5Screate_simple(rank, dims.data(), nullptr), "dataspace"), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const auto fv = fill_bytes(type.get(), fill);
  w.check(H5Pset_fill_value(dcpl.get(), type.get(), fv.data()), "fill value");
  for (const Input& in : inputs) {
    std::vector<hsize_t> sdims = dims_of(in.file.get(), source);
    std::vector<hsize_t> start(rank, 0);
    start[0] = hsize_t{in.run.detector_origin[0]} * scale;
    start[1] = hsize_t{in.run.detector_origin[1]} * scale;
    map_source(w, dcpl.get(), vspace.get(), in, source, start, sdims);
  }
  Hid ds(w.id(H5Dcreate2(parent, name, type.get(), vspace.get(), H5P_DEFAULT, dcpl.get(),
                         H5P_DEFAULT),
              std::string("virtual dataset ") + name),
         H5Dclose);
}

/// A virtual dataset `name` in `parent` concatenating each input's `source` rows (its first
/// `clusters` rows) in order; `fill` for an input without the column (the module id 0 of a
/// file that records no modules).
void concatenate(const Writer& w, hid_t parent, const char* name, const std::string& source,
                 const std::vector<Input>& inputs, uint64_t total) {
  const Input* with = nullptr;
  for (const Input& in : inputs)
    if (has_link(in.file.get(), source)) with = &in;
  if (with == nullptr) {
    // No run records modules (one run, the whole detector): its module ids, all 0, as a
    // dataset of the fill value that takes no space.
    const hsize_t n = total;
    Hid space(w.id(H5Screate_simple(1, &n, nullptr), "dataspace"), H5Sclose);
    Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    const uint16_t zero = 0;
    w.check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_UINT16, &zero), "fill value");
    Hid ds(w.id(H5Dcreate2(parent, name, H5T_STD_U16LE, space.get(), H5P_DEFAULT, dcpl.get(),
                           H5P_DEFAULT),
                std::string("dataset ") + name),
           H5Dclose);
    return;
  }
  std::vector<hsize_t> dims = dims_of(with->file.get(), source);
  dims[0] = total;
  const int rank = static_cast<int>(dims.size());
  Hid type = source_type(w, *with, source);
  Hid vspace(w.id(H5Screate_simple(rank, dims.data(), nullptr), "dataspace"), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const auto fv = fill_bytes(type.get(), 0.0);
  w.check(H5Pset_fill_value(dcpl.get(), type.get(), fv.data()), "fill value");
  for (const Input& in : inputs) {
    if (in.run.clusters == 0 || !has_link(in.file.get(), source)) continue;
    std::vector<hsize_t> sdims = dims;
    sdims[0] = in.run.clusters;
    std::vector<hsize_t> start(rank, 0);
    start[0] = in.run.cluster_offset;
    map_source(w, dcpl.get(), vspace.get(), in, source, start, sdims);
  }
  Hid ds(w.id(H5Dcreate2(parent, name, type.get(), vspace.get(), H5P_DEFAULT, dcpl.get(),
                         H5P_DEFAULT),
              std::string("virtual dataset ") + name),
         H5Dclose);
  // The units of the data and energies.
  Hid src(H5Dopen2(with->file.get(), source.c_str(), H5P_DEFAULT), H5Dclose);
  const std::string units = src.valid() ? string_attr(src.get(), "units") : "";
  if (!units.empty()) w.attr(ds.get(), "units", units);
}

/// The scale of an input's `source` over its image (1 for an image, f for the sub-pixel image),
/// 0 when the dataset is not image-shaped.
uint32_t image_scale(const Input& in, const std::string& source) {
  const auto d = dims_of(in.file.get(), source);
  if (d.size() < 2 || in.run.shape.rows == 0 || in.run.shape.cols == 0) return 0;
  if (d[0] % in.run.shape.rows != 0 || d[1] % in.run.shape.cols != 0) return 0;
  const hsize_t f = d[0] / in.run.shape.rows;
  return f >= 1 && d[1] / in.run.shape.cols == f ? static_cast<uint32_t>(f) : 0;
}

/// Whether every input has `source` image-shaped at the same scale and with the same trailing
/// dimensions; the scale then, 0 otherwise.
uint32_t common_scale(const std::vector<Input>& inputs, const std::string& source) {
  uint32_t scale = 0;
  std::vector<hsize_t> trailing;
  for (const Input& in : inputs) {
    if (!has_link(in.file.get(), source)) return 0;
    const uint32_t s = image_scale(in, source);
    auto d = dims_of(in.file.get(), source);
    d.erase(d.begin(), d.begin() + 2);
    if (s == 0 || (scale != 0 && (s != scale || d != trailing))) return 0;
    scale = s;
    trailing = d;
  }
  return scale;
}

std::vector<double> axis(uint64_t n, uint32_t scale) {
  std::vector<double> v(n);
  for (uint64_t i = 0; i < n; ++i)
    v[i] = scale == 1 ? static_cast<double>(i) : (static_cast<double>(i) + 0.5) / scale;
  return v;
}

void write_master(Writer& w, std::vector<Input>& inputs, MasterSummary& sum) {
  const hid_t f = w.file.get();
  const auto& detector = sum.detector_shape;
  w.attr(f, "default", "entry");
  Hid entry = w.group(f, "entry", "NXentry");
  w.attr(entry.get(), "program_name", "glint master");
  w.attr(entry.get(), "program_version", GLINT_VERSION);
  std::string start, end;
  bool all_closed = true;
  for (const Input& in : inputs) {
    if (start.empty() || (!in.start_time.empty() && in.start_time < start)) start = in.start_time;
    if (in.end_time > end) end = in.end_time;
    all_closed = all_closed && in.run.closed;
  }
  bool oriented = false;  // a module not mounted normal: every module records its orientation
  for (const Input& in : inputs)
    for (const ModuleInfo& m : in.run.modules)
      oriented = oriented || m.orientation != ModuleOrientation::normal;
  if (!start.empty()) w.attr(entry.get(), "start_time", start);
  if (all_closed && !end.empty()) w.attr(entry.get(), "end_time", end);
  {
    Hid instrument = w.group(entry.get(), "instrument", "NXinstrument");
    Hid det = w.group(instrument.get(), "detector", "NXdetector");
    w.attr<uint32_t>(det.get(), "detector_shape", detector);
    w.attr<uint32_t>(det.get(), "frame_shape", detector);
    uint32_t modules = 0;
    for (const Input& in : inputs) modules += static_cast<uint32_t>(in.run.modules.size());
    w.attr<uint32_t>(det.get(), "modules", std::span<const uint32_t>(&modules, 1));
    w.attr(det.get(), "detector_type", inputs.front().detector_type);
    for (const Input& in : inputs)
      for (const ModuleInfo& m : in.run.modules) {
        const std::string name = fmt::format("module_{:02}", m.id);
        Hid g = w.group(det.get(), name.c_str(), "NXdetector_module");
        // In the master, the data are detector-shaped: a module's data start at its place in
        // the detector.
        w.array<uint32_t>(g.get(), "data_origin", {m.detector_origin[0], m.detector_origin[1]});
        w.array<uint32_t>(g.get(), "data_size", {m.data_size[0], m.data_size[1]});
        w.attr<uint32_t>(g.get(), "module_id", std::span<const uint32_t>(&m.id, 1));
        w.attr<uint32_t>(g.get(), "detector_origin", m.detector_origin);
        w.attr(g.get(), "run", in.run.name);
        if (oriented) {
          // As the run file has it, with the module's axes placed in the detector. The
          // detector-shaped images are the runs' images, already in the modules' orientation.
          w.attr(g.get(), "orientation", std::string(to_string(m.orientation)));
          const ModuleAxes axes = module_axes(m.orientation, m.detector_origin, m.data_size);
          for (const auto& [name, vector] : {std::pair{"fast_pixel_direction", axes.fast},
                                             std::pair{"slow_pixel_direction", axes.slow}}) {
            w.array<double>(g.get(), name, {1.0}, "pixel");
            Hid ds(w.id(H5Dopen2(g.get(), name, H5P_DEFAULT), std::string("dataset ") + name),
                   H5Dclose);
            w.attr(ds.get(), "transformation_type", "translation");
            w.attr<double>(ds.get(), "vector", vector);
            w.attr<double>(ds.get(), "offset", axes.offset);
            w.attr(ds.get(), "offset_units", "pixel");
          }
        }
      }
    if (common_scale(inputs, "entry/instrument/detector/pixel_mask") == 1) {
      // Bit 0 (gap: no module there) where no run maps.
      place_images(w, det.get(), "pixel_mask", "entry/instrument/detector/pixel_mask", inputs,
                   detector, 1, 1.0);
      sum.images.push_back("/entry/instrument/detector/pixel_mask");
    }
  }
  {
    Hid runs = w.group(entry.get(), "runs", "NXcollection");
    for (const Input& in : inputs)
      w.check(H5Lcreate_external(link_name(in.run.path, w.path).c_str(), "/entry", runs.get(),
                                 in.run.name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
              "external link /entry/runs/" + in.run.name);
  }
  {
    Hid ped = w.group(entry.get(), "pedestal", "NXcollection");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const char* name : {"start_mean", "start_noise", "end_mean", "end_noise"}) {
      const std::string source = std::string("entry/pedestal/") + name;
      if (common_scale(inputs, source) != 1) continue;
      place_images(w, ped.get(), name, source, inputs, detector, 1, nan);
      sum.images.push_back("/" + source);
    }
  }
  // The image products (NXdata), each where every run has it.
  struct Product {
    const char* group;
    const char* signal;
  };
  for (const Product p : {Product{"hitmap", "counts"}, Product{"energy_image", "energy"},
                          Product{"subpixel_image", "counts"}}) {
    const std::string source = fmt::format("entry/{}/{}", p.group, p.signal);
    const uint32_t scale = common_scale(inputs, source);
    if (scale == 0 || dims_of(inputs.front().file.get(), source).size() != 2) continue;
    Hid g = w.group(entry.get(), p.group, "NXdata");
    w.attr(g.get(), "signal", p.signal);
    w.strings_attr(g.get(), "axes", {"y", "x"});
    w.attr<uint32_t>(g.get(), "y_indices", std::vector<uint32_t>{0});
    w.attr<uint32_t>(g.get(), "x_indices", std::vector<uint32_t>{1});
    place_images(w, g.get(), p.signal, source, inputs, detector, scale, 0.0);
    Hid src(H5Dopen2(inputs.front().file.get(), source.c_str(), H5P_DEFAULT), H5Dclose);
    const std::string units = src.valid() ? string_attr(src.get(), "units") : "";
    if (!units.empty()) {
      Hid ds(w.id(H5Dopen2(g.get(), p.signal, H5P_DEFAULT), source), H5Dclose);
      w.attr(ds.get(), "units", units);
    }
    w.array<double>(g.get(), "y", axis(uint64_t{detector[0]} * scale, scale), "pixel");
    w.array<double>(g.get(), "x", axis(uint64_t{detector[1]} * scale, scale), "pixel");
    sum.images.push_back("/" + source);
  }
  if (std::find(sum.images.begin(), sum.images.end(), "/entry/hitmap/counts") !=
      sum.images.end())
    w.attr(entry.get(), "default", "hitmap");
  {
    Hid clusters = w.group(entry.get(), "clusters", "NXcollection");
    std::vector<std::string> fields{"frame_number", "x", "y", "module", "data"};
    bool energy = true;
    for (const Input& in : inputs) energy = energy && in.energy;
    if (energy) fields.insert(fields.end(), {"energy", "energy_2x2"});
    for (const std::string& field : fields) {
      concatenate(w, clusters.get(), field.c_str(), "entry/clusters/" + field, inputs,
                  sum.clusters);
      sum.cluster_fields.push_back(field);
    }
    std::vector<std::string> names;
    std::vector<uint64_t> offsets;
    for (const Input& in : inputs) {
      names.push_back(in.run.name);
      offsets.push_back(in.run.cluster_offset);
    }
    offsets.push_back(sum.clusters);
    w.strings_attr(clusters.get(), "runs", names);
    w.attr<uint64_t>(clusters.get(), "run_offsets", offsets);
    w.attr(clusters.get(), "description",
           oriented ? "the clusters of /entry/runs, one run after the other (rows "
                      "run_offsets[i] to run_offsets[i + 1]); x, y and data local and native "
                      "to the module: in the detector at offset + x * fast + y * slow of "
                      "instrument/detector/module_<module>/fast_pixel_direction and "
                      "slow_pixel_direction (offset and vector attributes)"
                    : "the clusters of /entry/runs, one run after the other (rows run_offsets[i] "
                      "to run_offsets[i + 1]); x, y local to the module: in the detector at "
                      "instrument/detector/module_<module>/data_origin + (y, x)");
  }
}

}  // namespace

MasterSummary write_master_file(const std::vector<fs::path>& paths, const fs::path& output,
                                const MasterOptions& options) {
  hdf5::silence_errors();
  if (paths.empty()) throw MasterInputError("no run files given");
  std::error_code ec;
  if (fs::exists(fs::symlink_status(output, ec)) && !options.overwrite)
    throw MasterInputError(output.string() + ": exists (pass --overwrite to replace it)");
  std::vector<Input> inputs;
  for (const fs::path& p : paths) {
    if (fs::exists(output, ec) && fs::equivalent(p, output, ec))
      throw MasterInputError(p.string() + ": is the output file as well");
    inputs.push_back(inspect(p, options));
  }
  check_joinable(inputs);
  std::stable_sort(inputs.begin(), inputs.end(), [](const Input& a, const Input& b) {
    return first_module(a) < first_module(b);
  });
  name_runs(inputs);
  MasterSummary sum;
  sum.detector_shape = inputs.front().detector_shape;
  for (Input& in : inputs) {
    in.run.cluster_offset = sum.clusters;
    sum.clusters += in.run.clusters;
  }
  if (options.overwrite && fs::exists(fs::symlink_status(output, ec))) {
    if (!fs::is_regular_file(fs::symlink_status(output, ec)))
      throw MasterInputError(output.string() + ": exists and is not a regular file");
    if (::unlink(output.c_str()) != 0)
      throw OutputError(output.string() + ": cannot remove it: " + std::strerror(errno));
  }
  Writer w{output, {}};
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  w.file = Hid(w.id(H5Fcreate(output.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()),
                    "cannot create the file (directory missing or not writable?)"),
               H5Fclose);
  try {
    write_master(w, inputs, sum);
    if (w.file.reset() < 0) w.fail("closing");
  } catch (...) {
    w.file.reset();
    ::unlink(output.c_str());
    throw;
  }
  for (Input& in : inputs) sum.runs.push_back(in.run);
  return sum;
}

}  // namespace glint::pipeline
