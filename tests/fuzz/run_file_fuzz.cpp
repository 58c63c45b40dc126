// The run-file reader (read_run_file): frames, clusters and the pedestal datasets that a later
// run or a tool reads back (/entry/pedestal: start/end mean and noise, the end state's sum,
// sum2 and count).
//
// The input describes the file's content rather than its bytes: fuzzing raw HDF5 bytes would
// exercise Debian's (uninstrumented) libhdf5 parser, not glint. Each input is written as a valid
// HDF5 file in glint's layout with the fuzzed attributes, dataset lengths and values, then read:
//   u8 flags (bit 0: start_time, 1: end_time, 2: backend, 3: pedestal group, 4: end_sum2,
//   5: end_count), u8 n + n x u32 frame_shape, i32 cluster_size, f64 n_sigma,
//   u32 pedestal_window, u16 length + config text, then for each dataset of the frames, the
//   clusters and the pedestal: u8 (u16 for clusters/data) count + the values.
// Invariants: what it returns is self-consistent (every frame's clusters lie in the cluster
// arrays, a pedestal state has one value per pixel in each array) or it throws OutputError.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "glint/hdf5_handle.hpp"
#include "glint/pipeline/run_file.hpp"

using namespace glint;
using glint::hdf5::Handle;

namespace {

template <class T>
T take(fuzz::ByteReader& in) {
  T v{};
  const std::string_view b = in.bytes(sizeof(T));
  std::memcpy(&v, b.data(), b.size());
  return v;
}

template <class T>
std::vector<T> take_array(fuzz::ByteReader& in, std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = take<T>(in);
  return v;
}

template <class T>
void write_dataset(hid_t parent, const char* name, const std::vector<T>& v) {
  const hsize_t n = v.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle ds(H5Dcreate2(parent, name, hdf5::native_type<T>(), space.get(), H5P_DEFAULT,
                       H5P_DEFAULT, H5P_DEFAULT),
            H5Dclose);
  GLINT_FUZZ_CHECK(ds.valid());
  if (n > 0)
    GLINT_FUZZ_CHECK(H5Dwrite(ds.get(), hdf5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                              v.data()) >= 0);
}

template <class T>
void write_attr(hid_t obj, const char* name, const std::vector<T>& v) {
  const hsize_t n = v.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle a(H5Acreate2(obj, name, hdf5::native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  GLINT_FUZZ_CHECK(a.valid());
  if (n > 0) GLINT_FUZZ_CHECK(H5Awrite(a.get(), hdf5::native_type<T>(), v.data()) >= 0);
}

Handle group(hid_t parent, const char* name) {
  Handle g(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  GLINT_FUZZ_CHECK(g.valid());
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  hdf5::silence_errors();
  fuzz::ByteReader in(data, size);
  const uint8_t flags = in.u8();
  const auto shape = take_array<uint32_t>(in, in.u8() % 4);
  const auto cluster_size = take<int32_t>(in);
  const auto n_sigma = take<double>(in);
  const auto window = take<uint32_t>(in);
  const std::string config(in.str16());

  const auto path = fuzz::scratch_dir() / "input.h5";
  {
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    GLINT_FUZZ_CHECK(f.valid());
    Handle entry = group(f.get(), "entry");
    if (flags & 1)
      hdf5::write_attribute(entry.get(), "start_time", std::string("2026-01-01T00:00:00Z"));
    if (flags & 2)
      hdf5::write_attribute(entry.get(), "end_time", std::string("2026-01-01T00:01:00Z"));
    Handle inst = group(entry.get(), "instrument");
    Handle det = group(inst.get(), "detector");
    write_attr(det.get(), "frame_shape", shape);
    write_attr(det.get(), "cluster_size", std::vector<int32_t>{cluster_size});
    write_attr(det.get(), "n_sigma", std::vector<double>{n_sigma});
    write_attr(det.get(), "pedestal_window", std::vector<uint32_t>{window});
    if (flags & 4) hdf5::write_attribute(det.get(), "backend", std::string("cpu"));
    {
      Handle type = hdf5::string_type();
      Handle space(H5Screate(H5S_SCALAR), H5Sclose);
      Handle ds(H5Dcreate2(entry.get(), "config", type.get(), space.get(), H5P_DEFAULT,
                           H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
      const char* p = config.c_str();
      GLINT_FUZZ_CHECK(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) >= 0);
    }
    Handle frames = group(entry.get(), "frames");
    write_dataset(frames.get(), "frame_number", take_array<uint64_t>(in, in.u8()));
    write_dataset(frames.get(), "timestamp", take_array<uint64_t>(in, in.u8()));
    write_dataset(frames.get(), "cluster_offset", take_array<uint64_t>(in, in.u8()));
    write_dataset(frames.get(), "n_clusters", take_array<uint32_t>(in, in.u8()));
    write_dataset(frames.get(), "flags", take_array<uint8_t>(in, in.u8()));
    Handle clusters = group(entry.get(), "clusters");
    write_dataset(clusters.get(), "x", take_array<uint16_t>(in, in.u8()));
    write_dataset(clusters.get(), "y", take_array<uint16_t>(in, in.u8()));
    write_dataset(clusters.get(), "data", take_array<int32_t>(in, in.u16() % 4096));
    if (flags & 8) {
      Handle ped = group(entry.get(), "pedestal");
      for (const char* name : {"start_mean", "start_noise", "end_mean", "end_noise", "end_sum"})
        write_dataset(ped.get(), name, take_array<double>(in, in.u8()));
      if (flags & 16) write_dataset(ped.get(), "end_sum2", take_array<double>(in, in.u8()));
      if (flags & 32) write_dataset(ped.get(), "end_count", take_array<uint32_t>(in, in.u8()));
    }
  }

  pipeline::RunFileContents c;
  try {
    c = pipeline::read_run_file(path);
  } catch (const pipeline::OutputError& e) {
    GLINT_FUZZ_CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
    return 0;
  }
  const ClusterTable& t = c.clusters;
  GLINT_FUZZ_CHECK(t.frames().size() == c.frames.size());
  GLINT_FUZZ_CHECK(t.y().size() == t.x().size());
  GLINT_FUZZ_CHECK(t.data().size() == t.x().size() * t.values_per_cluster());
  for (const FrameRecord& r : t.frames()) {
    GLINT_FUZZ_CHECK(r.first_cluster <= t.x().size());
    GLINT_FUZZ_CHECK(r.n_clusters <= t.x().size() - r.first_cluster);
    for (uint64_t k = r.first_cluster; k < r.first_cluster + r.n_clusters; ++k)
      GLINT_FUZZ_CHECK(t.cluster_data(k).size() == t.values_per_cluster());
  }
  if (c.end_state) {
    const PedestalState& p = *c.end_state;
    const std::size_t pixels = p.shape.pixels();
    GLINT_FUZZ_CHECK(p.sum.size() == pixels && p.sum2.size() == pixels &&
                     p.count.size() == pixels);
    (void)p.means();
    (void)p.noises();
    (void)p.min_count();
  }
  return 0;
}
