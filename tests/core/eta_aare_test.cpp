// glint's eta2, eta cube, calibration tables and photon positions against what aare computed from
// the same clusters and cubes (eta_reference.hpp, docs/products.md "Checked against aare").
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "eta_reference.hpp"
#include "glint/clust_file.hpp"
#include "glint/products/eta_calibration.hpp"
#include "glint/products/table_eta.hpp"
#include "test_data.hpp"

namespace {

namespace gp = glint::products;
using glint::testing::AareEtaDigest;
using glint::testing::sha256;

// aare's results (sha256sum of its outputs as little-endian doubles).
constexpr AareEtaDigest kRaw3{
    "raw 3x3", "67e70d3843429158f9b4b87775164b2215395841bf1f28246d97120ed3ddbe7d", 10819, 2260,
    "5ee52620aa9583799834e295b997e7ae5973a3fba2a79cd6234ae81e0962818f",
    "65fea4e81223cae2e6bd8d5de06bb1647cc7fe00e4f0465bbd9267522289da13",
    "d9fdfbcf6b392e075d18fd934c0c4c43e0206aa881aaa5508624ab2b57ba31fc",
    "50f7fdca622704645c364db5197337d4b3d73815e0195269c2889c9f053dc010",
    "71c0a0639475e8fbe8cc086b25582857f6766a66886174a95390f5906b9fa47f",
    "0682094686688e92128aa48fd493de1a78a4785c019bccbbca229dc400c51328",
    "50f7fdca622704645c364db5197337d4b3d73815e0195269c2889c9f053dc010",
    "5db2f2ec052f570a1d7fd2dd4ee5c8b0b235745d407e82ab23f527aab2ede63b"};
constexpr AareEtaDigest kRaw5{
    "raw 5x5", "0d640362660708f67092fc7cd1a950ed46e3b1f907780d02cf25e3c9068f2eee", 10146, 2141,
    "f0e08cda56a82b5e91f7f1c7a5666fcdf6fd6b7b6746da53a76bb0256cfc7883",
    "8465bc918b26b2e0740b3f95a97b6ac393ca7a59c2cdb6b356fdc7910574dec4",
    "34764ad5a02432ace61a55b473818eccadab7b71bb75704825e9f3549e54acb3",
    "099228cebf35111de2a879f6ca920e730eef87176fa36428c9e091e7ef0d75f5",
    "7f80f44fd5159bb7414a788b9e87bd743903b0c606ce00899ebb55fb18179d8b",
    "7774924d6582ba9543ab10033ab3a637dbb7ca8d5d0350125215d9d75b1eb3e7",
    "099228cebf35111de2a879f6ca920e730eef87176fa36428c9e091e7ef0d75f5",
    "41f840a2b65b6575925f02d2bbfe32fd47ef66f6c6cb66b7a5efc3a30e323846"};
constexpr AareEtaDigest kFloat3{
    "float 3x3", "9607e86dedfc2f01d2765bfa0ced23a5c25426d28c557c5f15e4fd822723ed92", 38103,
    24496,
    "662bac1ea5fce0d509d09e1425a62e24814b038493a1f675131fd1b85ca543c9",
    "e51bf7da8d0965d7f653f6ade5a652d4e2ef895a42db4c22fffb82be0aca357c",
    "ab6ee8db142c56ca8f2b0d2ebe1df745ca204541c663a79e8b668e0749b82090",
    "d5c858c03f2e521d4df7f99b45cb8cef691d76aa5eacf47fd7b320a2572930fe",
    "2a58b5dc15303a5385014aaf29c8ed7a277acd6442500f343d2e26f5ce20bb36",
    "f3fe3a7e7816b0a8a053bf8354ddfceae2849d9f7a29e40417cf992740b791fa",
    "d5c858c03f2e521d4df7f99b45cb8cef691d76aa5eacf47fd7b320a2572930fe",
    "498fe1c08a5cccc7050235941607404f07160eaa2d5b103f61f06d8ad3f6f192"};

constexpr glint::testing::AareEta3Digest kRaw3Eta3{
    "raw 3x3 eta3", 1000,
    "defc16664b547fdc63aac417d65a6921252cc2ac894defe3c0bc708aeb7c557f",
    "64d177db6dba9a4e1154c9082ae3fdd21f7e6a94a625536726a6de49cb537079",
    "db1e59d3100233131b85ff950850fdce8c0774180c0877b8743f76bc71c4923b",
    "1518076fd8126e844f232ff3c529519ef5321d0837447e298d9cabef8e9129c7",
    "4290f9addf1e20aa10a436e0c88d71065673d0c291491d4446d6b6a6e4e2fc30"};
constexpr glint::testing::AareEta3Digest kFloat3Eta3{
    "float 3x3 eta3", 24772,
    "7abcf23854cb1815bb44b5deb7585f7b2648b4bb6ff22fadea87c99adfc1f078",
    "9de1e0b2d508219715452f2a009e3c8dbab03efc210ef0a6ad8602a6b62e5d1d",
    "91da9cf74fc4ad395a8c28a69f547b6307b72e990761022337cdededa8eb6304",
    "d65a1289562ff8ea1e771d30f3451a001e369807dc89cf255a1a03aa4f740447",
    "29fe347ca796fc49b02abc61a4f9d29ecbfa8c5a43edf09b7e899b8d675e6cfc"};

std::string digest(std::span<const double> v) { return sha256(v.data(), v.size() * 8); }

template <typename T, typename EtaOf>
void check(const glint::ClusterTable& t, const AareEtaDigest& d, gp::EtaCube cube, EtaOf eta_of) {
  SCOPED_TRACE(d.name);
  ASSERT_EQ(t.n_clusters(), d.clusters);
  {
    const auto path = std::filesystem::temp_directory_path() /
                      ("glint_eta_aare_" + std::to_string(::getpid()) + ".clust");
    glint::ClustWriter w(path, t.cluster_size());
    w.write(t);
    w.close();
    EXPECT_EQ(glint::testing::file_sha256(path), d.clust);
    std::filesystem::remove(path);
  }
  std::vector<gp::Eta<T>> etas;
  std::vector<double> xy;
  for (std::size_t i = 0; i < t.n_clusters(); ++i) {
    etas.push_back(eta_of(t, i));
    xy.push_back(etas.back().x);
    xy.push_back(etas.back().y);
    cube.add(etas.back());
  }
  EXPECT_EQ(digest(xy), d.eta);
  EXPECT_EQ(digest(cube.counts()), d.cube);
  EXPECT_EQ(cube.added() + cube.outside(), d.clusters);
  const char* tables[2][3] = {{d.cdf_ietax, d.cdf_ietay, d.cdf_photons},
                              {d.rosenblatt_ietax, d.rosenblatt_ietay, d.rosenblatt_photons}};
  for (int m = 0; m < 2; ++m) {
    const gp::EtaCalibration cal(cube, m == 0 ? gp::EtaMethod::cdf : gp::EtaMethod::rosenblatt);
    EXPECT_EQ(digest(cal.ietax()), tables[m][0]) << gp::to_string(cal.method());
    EXPECT_EQ(digest(cal.ietay()), tables[m][1]) << gp::to_string(cal.method());
    std::vector<double> photons;
    uint64_t outside = 0;
    for (std::size_t i = 0; i < t.n_clusters(); ++i) {
      const auto p = cal.position(t.x()[i], t.y()[i], etas[i]);
      if (!p) {
        ++outside;
        continue;
      }
      photons.insert(photons.end(), {p->x, p->y, p->energy});
    }
    EXPECT_EQ(outside, d.outside) << gp::to_string(cal.method());
    EXPECT_EQ(digest(photons), tables[m][2]) << gp::to_string(cal.method());
  }
}

template <typename EtaOf>
void check_eta3(const glint::ClusterTable& t, const glint::testing::AareEta3Digest& d,
                gp::EtaCube cube, EtaOf eta_of) {
  SCOPED_TRACE(d.name);
  std::vector<double> xy;
  for (std::size_t i = 0; i < t.n_clusters(); ++i) {
    const auto eta = eta_of(t, i);
    xy.insert(xy.end(), {eta.x, eta.y});
    cube.add(eta);
  }
  EXPECT_EQ(digest(xy), d.eta);
  EXPECT_EQ(digest(cube.counts()), d.cube);
  const gp::EtaCalibration cal(cube, gp::EtaMethod::cdf);
  EXPECT_EQ(digest(cal.ietax()), d.ietax);
  EXPECT_EQ(digest(cal.ietay()), d.ietay);
  std::vector<double> photons;
  uint64_t outside = 0;
  for (std::size_t i = 0; i < t.n_clusters(); ++i) {
    const auto p = cal.position_eta3(t.x()[i], t.y()[i], eta_of(t, i));
    if (p)
      photons.insert(photons.end(), {p->x, p->y, p->energy});
    else
      ++outside;
  }
  EXPECT_EQ(outside, d.outside);
  EXPECT_EQ(digest(photons), d.photons);
}

TEST(EtaAgainstAare, Raw3x3) {
  check<int32_t>(glint::testing::eta_raw_clusters(3), kRaw3,
                 glint::testing::eta_reference_cube(false), gp::eta2_int);
}

TEST(EtaAgainstAare, Raw5x5) {
  check<int32_t>(glint::testing::eta_raw_clusters(5), kRaw5,
                 glint::testing::eta_reference_cube(false), gp::eta2_int);
}

TEST(EtaAgainstAare, Float3x3) {
  const glint::ClusterTable t = glint::testing::eta_float_clusters();
  ASSERT_EQ(t.value_type(), glint::ClusterValues::float32);
  check<float>(t, kFloat3, glint::testing::eta_reference_cube(true), gp::eta2_float);
  check_eta3(t, kFloat3Eta3, glint::testing::eta3_reference_cube(true), gp::eta3_float);
}

TEST(EtaAgainstAare, Raw3x3Eta3) {
  check_eta3(glint::testing::eta_raw_clusters(3), kRaw3Eta3,
             glint::testing::eta3_reference_cube(false), gp::eta3_int);
}

}  // namespace
