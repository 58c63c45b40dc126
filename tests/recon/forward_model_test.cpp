#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>

#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"
#include "glint/recon/volume_io.hpp"

using glint::tv::Dims;
namespace fs = std::filesystem;

namespace {
std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("glint_recon_" + std::to_string(::getpid()) + name))
      .string();
}
}  // namespace

TEST(ForwardModel, IdentityHasNoTransferFunction) {
  EXPECT_TRUE(glint::recon::make_forward_model("identity", Dims{4, 4, 4}).H.identity());
}

TEST(ForwardModel, GaussianIsOneAtZeroFrequencyAndFallsOff) {
  const Dims d{8, 6, 4};
  const auto fm = glint::recon::make_forward_model("gaussian:1.5,1,0.5", d);
  ASSERT_EQ(fm.H.h.size(), d.spectrum_size());
  EXPECT_FLOAT_EQ(fm.H.h[0], 1.0f);
  const double pi2 = 2 * M_PI * M_PI;
  EXPECT_NEAR(fm.H.h[1], std::exp(-pi2 * 2.25 / 64.0), 1e-6);           // kx = 1
  EXPECT_NEAR(fm.H.h[5 * 5], std::exp(-pi2 * 1.0 / 36.0), 1e-6);        // ky = -1 (index 5)
  // A x keeps a constant volume constant (H(0) = 1).
  std::vector<float> c(d.voxels(), 2.0f);
  for (float v : glint::recon::apply_forward(fm.H, d, c, 1)) EXPECT_NEAR(v, 2.0f, 1e-5f);
}

TEST(ForwardModel, BadSpecificationsAreNamed) {
  const Dims d{4, 4, 4};
  for (const char* bad : {"gauss", "gaussian:1,2", "gaussian:1,x,2", "gaussian:-1,1,1",
                          "mask:nofile.h5", "mask:/nonexistent/m.h5:/m"}) {
    try {
      glint::recon::make_forward_model(bad, d);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(bad).substr(0, 4)), std::string::npos)
          << e.what();
    }
  }
}

TEST(ForwardModel, MaskFromHdf5) {
  const Dims d{6, 4, 4};
  const std::string f = temp_file("mask.h5");
  glint::recon::Volume m{Dims{d.nx / 2 + 1, d.ny, d.nz}, {}};
  m.data.resize(m.dims.voxels());
  for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] = float(i % 2);
  m.data[0] = 1.0f;
  glint::recon::write_volumes(f, {{"/mask", &m, {}}});
  const auto fm = glint::recon::make_forward_model("mask:" + f + ":/mask", d);
  ASSERT_EQ(fm.H.h.size(), d.spectrum_size());
  EXPECT_EQ(fm.H.h[1], 1.0f);
  EXPECT_EQ(fm.H.h[2], 0.0f);
  m.data[3] = -1.0f;
  glint::recon::write_volumes(f, {{"/mask", &m, {}}});
  try {
    glint::recon::make_forward_model("mask:" + f + ":/mask", d);
    ADD_FAILURE() << "negative mask accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/mask"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos);
  }
  try {
    glint::recon::make_forward_model("mask:" + f + ":/mask", Dims{8, 4, 4});
    ADD_FAILURE() << "wrong shape accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos);
  }
  fs::remove(f);
}

TEST(VolumeIo, Float64InputAndAttributesRoundTrip) {
  const std::string f = temp_file("vol.h5");
  {
    const hsize_t dims[3] = {2, 3, 4};
    std::vector<double> v(24);
    std::iota(v.begin(), v.end(), 0.5);
    hid_t file = H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate_simple(3, dims, nullptr);
    hid_t ds = H5Dcreate2(file, "/data", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(file);
  }
  const auto vol = glint::recon::read_volume(f, "/data");
  EXPECT_EQ(vol.dims, (Dims{4, 3, 2}));
  EXPECT_EQ(vol.data[5], 5.5f);
  EXPECT_THROW(glint::recon::read_volume(f, "/missing"), std::runtime_error);
  EXPECT_THROW(glint::recon::read_volume(f + ".none", "/data"), std::runtime_error);
  glint::recon::write_volumes(f, {{"/volume", &vol, {{"lambda", 0.25}, {"outer", 20LL},
                                                       {"forward", std::string("identity")}}}});
  const auto back = glint::recon::read_volume(f, "/volume");
  EXPECT_EQ(back.data, vol.data);
  hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(file, "/volume", H5P_DEFAULT);
  double lambda = 0;
  hid_t a = H5Aopen(ds, "lambda", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_DOUBLE, &lambda);
  H5Aclose(a);
  long long outer = 0;
  a = H5Aopen(ds, "outer", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_LLONG, &outer);
  H5Aclose(a);
  // Text attributes are variable-length UTF-8, as in the run files (and as h5py writes a str).
  a = H5Aopen(ds, "forward", H5P_DEFAULT);
  hid_t type = H5Aget_type(a);
  EXPECT_TRUE(H5Tis_variable_str(type) > 0);
  EXPECT_EQ(H5Tget_cset(type), H5T_CSET_UTF8);
  char* text = nullptr;
  H5Aread(a, type, &text);
  const std::string forward = text ? text : "";
  H5free_memory(text);
  H5Tclose(type);
  H5Aclose(a);
  H5Dclose(ds);
  H5Fclose(file);
  EXPECT_EQ(lambda, 0.25);
  EXPECT_EQ(outer, 20);
  EXPECT_EQ(forward, "identity");
  fs::remove(f);
}

TEST(Phantom, EllipsoidsOfSeveralValuesOnZeroBackground) {
  const int n = 32;
  const auto p = glint::recon::make_phantom(n);
  ASSERT_EQ(p.size(), std::size_t(n) * n * n);
  EXPECT_EQ(p[0], 0.0f);                                        // corner: background
  std::vector<float> values(p.begin(), p.end());
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  EXPECT_GE(values.size(), 6u);
  EXPECT_EQ(values.front(), 0.0f);
  EXPECT_EQ(values.back(), 1.0f);
  EXPECT_EQ(p[(std::size_t(n / 2) * n + n / 2) * n + n / 2], 0.2f);  // centre: interior
  EXPECT_EQ(glint::recon::make_phantom(n, n, n), p);
}

// A detector's volume of slices: the same ellipsoids stretched to an nx x ny x nz box.
TEST(Phantom, FillsABoxOfAnyExtent) {
  const int nx = 40, ny = 24, nz = 8;
  const auto p = glint::recon::make_phantom(nx, ny, nz);
  ASSERT_EQ(p.size(), std::size_t(nx) * ny * nz);
  auto at = [&](int i, int j, int k) { return p[(std::size_t(k) * ny + j) * nx + i]; };
  EXPECT_EQ(at(0, 0, 0), 0.0f);                        // corner: background
  EXPECT_EQ(at(nx / 2, ny / 2, nz / 2), 0.2f);         // centre: interior
  EXPECT_EQ(at(nx / 2, ny / 2, 0), 0.0f);              // first slice: outside the body
  EXPECT_EQ(at(nx / 2, ny / 2, 1), 0.2f);              // second slice: the interior
  EXPECT_EQ(at(34, ny / 2, nz / 2), 0.5f);             // x = 0.725: the body's shell
  EXPECT_THROW(glint::recon::make_phantom(40, 1, 8), std::invalid_argument);
}
