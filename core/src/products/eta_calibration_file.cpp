#include "glint/products/eta_calibration_file.hpp"

#include <hdf5.h>

#include <algorithm>

#include <fmt/format.h>

#include "glint/hdf5_handle.hpp"

namespace glint::products {
namespace {

constexpr const char* kGroup = "eta_calibration";

using hdf5::Handle;

bool write_dataset(hid_t group, const char* name, std::span<const double> values,
                   std::span<const hsize_t> dims) {
  const Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     H5Sclose);
  if (!space.valid()) return false;
  const Handle set(H5Dcreate2(group, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT),
                   H5Dclose);
  return set.valid() &&
         H5Dwrite(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0;
}

bool write_strings(hid_t obj, const char* name, const std::vector<std::string>& values) {
  const Handle type = hdf5::string_type();
  const hsize_t n = values.size();
  const Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  if (!type.valid() || !space.valid()) return false;
  const Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose);
  std::vector<const char*> p;
  for (const auto& s : values) p.push_back(s.c_str());
  return attr.valid() && H5Awrite(attr.get(), type.get(), p.data()) >= 0;
}

class Reader {
 public:
  Reader(const std::filesystem::path& path, hid_t group) : path_(path.string()), group_(group) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw CalibrationFileError(fmt::format("eta calibration file {}: {}", path_, what));
  }

  /// A float64 dataset of rank `dims.size()`; its shape is returned in dims.
  std::vector<double> dataset(const char* name, std::vector<hsize_t>& dims) const {
    if (H5Lexists(group_, name, H5P_DEFAULT) <= 0)
      fail(fmt::format("no dataset {}/{}", kGroup, name));
    const Handle set(H5Dopen2(group_, name, H5P_DEFAULT), H5Dclose);
    if (!set.valid()) fail(fmt::format("{}/{} is not a dataset", kGroup, name));
    const Handle space(H5Dget_space(set.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank != static_cast<int>(dims.size()))
      fail(fmt::format("{}/{} has {} dimensions, expected {}", kGroup, name, rank, dims.size()));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    const Handle type(H5Dget_type(set.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_FLOAT)
      fail(fmt::format("{}/{} is not a floating-point dataset", kGroup, name));
    std::size_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<double> v(n);
    if (n > 0 &&
        H5Dread(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
      fail(fmt::format("cannot read {}/{}", kGroup, name));
    return v;
  }

  std::vector<double> edges(const char* name) const {
    std::vector<hsize_t> dims(1);
    return dataset(name, dims);
  }

  bool has_attribute(const char* name) const { return H5Aexists(group_, name) > 0; }

  template <class T>
  T number(const char* name) const {
    if (!has_attribute(name)) fail(fmt::format("no attribute {}@{}", kGroup, name));
    const Handle attr(H5Aopen(group_, name, H5P_DEFAULT), H5Aclose);
    const Handle space(H5Aget_space(attr.get()), H5Sclose);
    T v{};
    if (H5Sget_simple_extent_npoints(space.get()) != 1 ||
        H5Aread(attr.get(), hdf5::native_type<T>(), &v) < 0)
      fail(fmt::format("attribute {}@{} is not a number", kGroup, name));
    return v;
  }

  std::vector<std::string> strings(const char* name) const {
    if (!has_attribute(name)) fail(fmt::format("no attribute {}@{}", kGroup, name));
    const Handle attr(H5Aopen(group_, name, H5P_DEFAULT), H5Aclose);
    const Handle type(H5Aget_type(attr.get()), H5Tclose);
    const Handle space(H5Aget_space(attr.get()), H5Sclose);
    if (H5Tget_class(type.get()) != H5T_STRING)
      fail(fmt::format("attribute {}@{} is not text", kGroup, name));
    const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get()));
    std::vector<std::string> out;
    if (H5Tis_variable_str(type.get()) > 0) {
      std::vector<char*> p(n, nullptr);
      const Handle mem = hdf5::string_type();
      if (H5Aread(attr.get(), mem.get(), p.data()) < 0)
        fail(fmt::format("cannot read attribute {}@{}", kGroup, name));
      for (char* s : p) out.emplace_back(s != nullptr ? s : "");
      H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, p.data());
    } else {  // fixed-length text (numpy bytes through h5py)
      const std::size_t size = H5Tget_size(type.get());
      const Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mem.get(), size);
      std::vector<char> buf(n * size);
      if (H5Aread(attr.get(), mem.get(), buf.data()) < 0)
        fail(fmt::format("cannot read attribute {}@{}", kGroup, name));
      for (std::size_t i = 0; i < n; ++i) {
        const char* b = buf.data() + i * size;
        out.emplace_back(b, std::find(b, b + size, '\0'));
      }
    }
    return out;
  }

 private:
  std::string path_;
  hid_t group_;
};

}  // namespace

void write_eta_calibration(const std::filesystem::path& path, const EtaCalibrationFile& file,
                           bool overwrite) {
  hdf5::silence_errors();
  auto fail = [&](const std::string& what) {
    throw CalibrationFileError(fmt::format("eta calibration file {}: {}", path.string(), what));
  };
  const EtaCube& cube = file.cube;
  const EtaCalibration& cal = file.calibration;
  if (!(cube.eta_x() == cal.eta_x() && cube.eta_y() == cal.eta_y() &&
        cube.energy() == cal.energy()))
    fail("the cube and the calibration have different bin edges");
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(path, ec))
    fail("exists already (use --overwrite to replace it)");
  const Handle f(H5Fcreate(path.c_str(), overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT,
                           H5P_DEFAULT),
                 H5Fclose);
  if (!f.valid()) fail("cannot be created");
  const Handle g(H5Gcreate2(f.get(), kGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail("cannot create group /eta_calibration");
  const hsize_t nx = cube.nx(), ny = cube.ny(), ne = cube.ne();
  const hsize_t d3[3] = {nx, ny, ne};
  const hsize_t dx[1] = {nx + 1}, dy[1] = {ny + 1}, de[1] = {ne + 1};
  bool ok = write_dataset(g.get(), "eta_x_edges", cube.eta_x().edges(), dx) &&
            write_dataset(g.get(), "eta_y_edges", cube.eta_y().edges(), dy) &&
            write_dataset(g.get(), "energy_edges", cube.energy().edges(), de) &&
            write_dataset(g.get(), "cube", cube.counts(), d3) &&
            write_dataset(g.get(), "ietax", cal.ietax(), d3) &&
            write_dataset(g.get(), "ietay", cal.ietay(), d3);
  ok = ok && hdf5::write_attribute(g.get(), "method", std::string(to_string(cal.method()))) &&
       hdf5::write_attribute(g.get(), "eta", std::string("eta2")) &&
       hdf5::write_attribute<int32_t>(g.get(), "cluster_size", file.cluster_size) &&
       hdf5::write_attribute<uint64_t>(g.get(), "clusters", file.clusters) &&
       write_strings(g.get(), "sources", file.sources);
  if (!ok) fail("cannot be written");
}

EtaCalibrationFile read_eta_calibration(const std::filesystem::path& path) {
  hdf5::silence_errors();
  auto fail = [&](const std::string& what) -> void {
    throw CalibrationFileError(fmt::format("eta calibration file {}: {}", path.string(), what));
  };
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("does not exist");
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("is not an HDF5 file");
  const Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) fail("cannot be opened");
  if (H5Lexists(f.get(), kGroup, H5P_DEFAULT) <= 0)
    fail("not an eta calibration file (no group /eta_calibration)");
  const Handle g(H5Gopen2(f.get(), kGroup, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail("/eta_calibration is not a group");
  const Reader r(path, g.get());

  auto axis = [&](const char* name) {
    try {
      return BinEdges(r.edges(name), std::string(kGroup) + "/" + name);
    } catch (const std::invalid_argument& e) {
      r.fail(e.what());
    }
  };
  BinEdges x = axis("eta_x_edges"), y = axis("eta_y_edges"), e = axis("energy_edges");
  const hsize_t want[3] = {x.bins(), y.bins(), e.bins()};
  auto table = [&](const char* name) {
    std::vector<hsize_t> dims(3);
    std::vector<double> v = r.dataset(name, dims);
    if (dims[0] != want[0] || dims[1] != want[1] || dims[2] != want[2])
      r.fail(fmt::format("{}/{} is {} x {} x {}, the edges give {} x {} x {}", kGroup, name,
                         dims[0], dims[1], dims[2], want[0], want[1], want[2]));
    return v;
  };
  std::vector<double> counts = table("cube");
  std::vector<double> ietax = table("ietax");
  std::vector<double> ietay = table("ietay");

  const std::vector<std::string> method = r.strings("method");
  if (method.size() != 1) r.fail(fmt::format("attribute {}@method is not one text", kGroup));
  EtaMethod m = EtaMethod::cdf;
  try {
    m = parse_eta_method(method[0]);
  } catch (const std::invalid_argument& ex) {
    r.fail(ex.what());
  }
  const std::vector<std::string> eta = r.strings("eta");
  if (eta.size() != 1 || eta[0] != "eta2")
    r.fail(fmt::format("attribute {}@eta must be \"eta2\"", kGroup));

  EtaCube cube(x, y, e);
  std::copy(counts.begin(), counts.end(), cube.counts().begin());
  EtaCalibrationFile out{std::move(cube),
                         EtaCalibration(std::move(x), std::move(y), std::move(e),
                                        std::move(ietax), std::move(ietay), m),
                         0, 0, {}};
  out.cluster_size = r.number<int32_t>("cluster_size");
  out.clusters = r.number<uint64_t>("clusters");
  out.sources = r.strings("sources");
  return out;
}

}  // namespace glint::products
