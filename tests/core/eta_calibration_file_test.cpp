// The eta calibration file: what is written reads back exactly; a broken file gets an error
// naming the file and what is wrong.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "glint/products/eta_calibration_file.hpp"

namespace {

namespace gp = glint::products;

class EtaCalibrationFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("glint_eta_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path path(const std::string& n) const { return dir_ / n; }

  static gp::EtaCalibrationFile sample(gp::EtaMethod m) {
    gp::EtaCube cube = gp::EtaCube::regular(4, -0.1, 1.1, 2, 100.0, 400.0);
    std::iota(cube.counts().begin(), cube.counts().end(), 0.5);
    return {cube, gp::EtaCalibration(cube, m), 5, 1234, {"a.h5", "b.h5"}};
  }

  /// Writes a sample, then lets `edit` break it through HDF5, and expects `message` on reading.
  template <class Edit>
  void expect_broken(Edit edit, const std::string& message) {
    const auto p = path("broken.h5");
    gp::write_eta_calibration(p, sample(gp::EtaMethod::cdf), true);
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    edit(f);
    H5Fclose(f);
    try {
      gp::read_eta_calibration(p);
      ADD_FAILURE() << "no error, expected: " << message;
    } catch (const gp::CalibrationFileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(p.string()), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
    }
  }

  std::filesystem::path dir_;
};

std::vector<double> vec(std::span<const double> s) { return {s.begin(), s.end()}; }

void write_doubles(hid_t f, const char* name, std::vector<hsize_t> dims, double value) {
  std::size_t n = 1;
  for (hsize_t d : dims) n *= d;
  const std::vector<double> v(n, value);
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(s);
}

TEST_F(EtaCalibrationFileTest, ReadsBackWhatWasWritten) {
  for (gp::EtaMethod m : {gp::EtaMethod::cdf, gp::EtaMethod::rosenblatt}) {
    const gp::EtaCalibrationFile in = sample(m);
    const auto p = path("eta.h5");
    gp::write_eta_calibration(p, in, true);
    const gp::EtaCalibrationFile out = gp::read_eta_calibration(p);
    EXPECT_EQ(vec(out.cube.eta_x().edges()), vec(in.cube.eta_x().edges()));
    EXPECT_EQ(vec(out.cube.eta_y().edges()), vec(in.cube.eta_y().edges()));
    EXPECT_EQ(vec(out.cube.energy().edges()), vec(in.cube.energy().edges()));
    EXPECT_EQ(vec(out.cube.counts()), vec(in.cube.counts()));
    EXPECT_EQ(vec(out.calibration.ietax()), vec(in.calibration.ietax()));
    EXPECT_EQ(vec(out.calibration.ietay()), vec(in.calibration.ietay()));
    EXPECT_EQ(out.calibration.method(), m);
    EXPECT_EQ(out.cluster_size, 5);
    EXPECT_EQ(out.clusters, 1234u);
    EXPECT_EQ(out.sources, (std::vector<std::string>{"a.h5", "b.h5"}));
    EXPECT_EQ(out.cube.nx(), 4u);
    EXPECT_EQ(out.cube.ne(), 2u);
    // The tables read back give the same positions.
    const gp::Eta<int32_t> eta{0.3, 0.8, gp::Corner::top_right, 150};
    EXPECT_EQ(out.calibration.position(7, 9, eta)->x, in.calibration.position(7, 9, eta)->x);
    EXPECT_EQ(out.calibration.position(7, 9, eta)->y, in.calibration.position(7, 9, eta)->y);
  }
}

TEST_F(EtaCalibrationFileTest, RefusesToReplaceWithoutOverwrite) {
  const auto p = path("eta.h5");
  gp::write_eta_calibration(p, sample(gp::EtaMethod::cdf), false);
  try {
    gp::write_eta_calibration(p, sample(gp::EtaMethod::cdf), false);
    ADD_FAILURE() << "replaced an existing file";
  } catch (const gp::CalibrationFileError& e) {
    EXPECT_NE(std::string(e.what()).find("exists already"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gp::write_eta_calibration(p, sample(gp::EtaMethod::cdf), true));
}

TEST_F(EtaCalibrationFileTest, NotACalibrationFile) {
  EXPECT_THROW(
      {
        try {
          gp::read_eta_calibration(path("missing.h5"));
        } catch (const gp::CalibrationFileError& e) {
          EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
          throw;
        }
      },
      gp::CalibrationFileError);
  std::ofstream(path("text.h5")) << "not hdf5\n";
  try {
    gp::read_eta_calibration(path("text.h5"));
    ADD_FAILURE();
  } catch (const gp::CalibrationFileError& e) {
    EXPECT_NE(std::string(e.what()).find("is not an HDF5 file"), std::string::npos) << e.what();
  }
  const hid_t f = H5Fcreate(path("other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  try {
    gp::read_eta_calibration(path("other.h5"));
    ADD_FAILURE();
  } catch (const gp::CalibrationFileError& e) {
    EXPECT_NE(std::string(e.what()).find("not an eta calibration file (no group "
                                         "/eta_calibration)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(EtaCalibrationFileTest, MissingOrInconsistentItemsAreNamed) {
  expect_broken([](hid_t f) { H5Ldelete(f, "eta_calibration/ietay", H5P_DEFAULT); },
                "no dataset eta_calibration/ietay");
  expect_broken([](hid_t f) { H5Ldelete(f, "eta_calibration/energy_edges", H5P_DEFAULT); },
                "no dataset eta_calibration/energy_edges");
  expect_broken(
      [](hid_t f) {
        H5Ldelete(f, "eta_calibration/ietax", H5P_DEFAULT);
        write_doubles(f, "eta_calibration/ietax", {4, 3, 2}, 0.0);
      },
      "eta_calibration/ietax is 4 x 3 x 2, the edges give 4 x 4 x 2");
  expect_broken(
      [](hid_t f) {
        H5Ldelete(f, "eta_calibration/cube", H5P_DEFAULT);
        write_doubles(f, "eta_calibration/cube", {32}, 0.0);
      },
      "eta_calibration/cube has 1 dimensions, expected 3");
  expect_broken(
      [](hid_t f) {
        H5Ldelete(f, "eta_calibration/eta_x_edges", H5P_DEFAULT);
        write_doubles(f, "eta_calibration/eta_x_edges", {5}, 0.0);
      },
      "eta_calibration/eta_x_edges: edges must increase strictly");
  expect_broken(
      [](hid_t f) {
        const hid_t g = H5Gopen2(f, "eta_calibration", H5P_DEFAULT);
        H5Adelete(g, "method");
        H5Gclose(g);
      },
      "no attribute eta_calibration@method");
  expect_broken(
      [](hid_t f) {
        const hid_t g = H5Gopen2(f, "eta_calibration", H5P_DEFAULT);
        H5Adelete(g, "eta");
        const hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        const hid_t s = H5Screate(H5S_SCALAR);
        const hid_t a = H5Acreate2(g, "eta", t, s, H5P_DEFAULT, H5P_DEFAULT);
        const char* v = "eta3";
        H5Awrite(a, t, &v);
        H5Aclose(a);
        H5Sclose(s);
        H5Tclose(t);
        H5Gclose(g);
      },
      "attribute eta_calibration@eta must be \"eta2\"");
}

TEST_F(EtaCalibrationFileTest, FixedLengthTextIsRead) {
  // h5py writes numpy bytes as fixed-length strings.
  const auto p = path("fixed.h5");
  gp::write_eta_calibration(p, sample(gp::EtaMethod::cdf), true);
  const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t g = H5Gopen2(f, "eta_calibration", H5P_DEFAULT);
  H5Adelete(g, "method");
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, 10);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(g, "method", t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, "rosenblatt");
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  H5Gclose(g);
  H5Fclose(f);
  EXPECT_EQ(gp::read_eta_calibration(p).calibration.method(), gp::EtaMethod::rosenblatt);
}

TEST_F(EtaCalibrationFileTest, CubeAndTablesMustShareEdges) {
  gp::EtaCalibrationFile f = sample(gp::EtaMethod::cdf);
  const gp::EtaCube other = gp::EtaCube::regular(4, 0.0, 1.0, 2, 100.0, 400.0);
  gp::EtaCalibrationFile bad{other, f.calibration, 3, 0, {}};
  EXPECT_THROW(gp::write_eta_calibration(path("bad.h5"), bad, true), gp::CalibrationFileError);
}

}  // namespace
