// Several glintd on one detector (docs/modules.md): two glintd on one host over loopback, each
// receiving its own part (two modules of a four-module detector) from its own `glint sim`, read
// together with `glint ctl --endpoint A --endpoint B`, and their run files joined by
// `glint master` into one detector.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "control_client.hpp"
#include "glint/hdf5_handle.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glintd_rig.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

/// Part `k` of a 64 x 48 detector: a 32 x 48 image of two modules (two ports, one module each)
/// at row 32 k, module ids 2 k and 2 k + 1.
struct Part {
  glint::testing::GlintdRig rig;
  std::vector<std::string> data_eps;
  explicit Part(int k) : rig("modules_" + std::string(k == 0 ? "top" : "bottom")) {
    rig.rows = 32;
    rig.cols = 48;
    rig.dark = 16;
    data_eps = {rig.data_ep, glint::testing::loopback(glint::testing::free_tcp_port())};
    std::ofstream(rig.config)
        << "detector: {rows: 32, cols: 48, ports: [2, 1], modules: [2, 1],\n"
        << "           placement: {detector_shape: [64, 48], origin: [" << 32 * k
        << ", 0], first_module: " << 2 * k << "}}\n"
        << "ingest: {endpoints: [\"" << data_eps[0] << "\", \"" << data_eps[1] << "\"]}\n"
        << "pedestal: {dark_frames: 16, window: 16}\n"
        << "finder: {backend: cpu, threads: 1}\n"
        << "output: {directory: \"" << rig.runs.string() << "\", run_name: " << rig.run_name
        << ", flush_interval_ms: 100}\n"
        << "control: {endpoint: \"" << rig.control_ep << "\"}\n"
        << "preview: {" << rig.preview << "}\n";
  }
  /// `glint sim` from this part's configuration (its shape, ports and endpoints).
  std::vector<std::string> sim(uint64_t frames, const std::string& seed) const {
    return {bin("glint").string(), "--log-level", "warn", "sim", "--config",
            rig.config.string(), "--dark", "16", "--frames", std::to_string(frames),
            "--rate", "0", "--photons", "12", "--seed", seed, "--no-drop", "--wait-ms",
            "20000", "-q"};
  }
};

/// A dataset of `file` read whole as doubles (exact for the counts and ids here).
std::vector<double> read_doubles(const fs::path& file, const std::string& name,
                                 std::vector<hsize_t>* dims = nullptr) {
  using glint::hdf5::Handle;
  glint::hdf5::silence_errors();
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  Handle ds(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  EXPECT_TRUE(ds.valid()) << file << ":" << name;
  if (!ds.valid()) return {};
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  if (dims) {
    dims->resize(H5Sget_simple_extent_ndims(space.get()));
    H5Sget_simple_extent_dims(space.get(), dims->data(), nullptr);
  }
  std::vector<double> v(H5Sget_simple_extent_npoints(space.get()));
  if (!v.empty()) {
    EXPECT_GE(H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  }
  return v;
}

}  // namespace

TEST(GlintdModules, TwoDaemonsOnePartEachJoinedByAMasterFile) {
  Part top(0), bottom(1);
  Process da(top.rig.glintd(), top.rig.dir / "glintd.log");
  Process db(bottom.rig.glintd(), bottom.rig.dir / "glintd.log");
  for (const Part* p : {&top, &bottom})
    ASSERT_TRUE(wait_status(p->rig.control_ep, [](const json&) { return true; }, 10s)["ok"])
        << da.log() << db.log();
  const std::vector<std::string> both{bin("glint").string(), "ctl", "--endpoint",
                                      top.rig.control_ep, "--endpoint", bottom.rig.control_ep};
  auto ctl = [&](std::vector<std::string> args, const fs::path& log) {
    std::vector<std::string> argv = both;
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, log);
  };
  auto start = ctl({"start"}, top.rig.dir / "start.log");
  ASSERT_EQ(start->wait_exit(20s), 0) << start->log();

  Process sa(top.sim(40, "3"), top.rig.dir / "sim.log");
  Process sb(bottom.sim(60, "4"), bottom.rig.dir / "sim.log");
  ASSERT_EQ(sa.wait_exit(60s), 0) << sa.log();
  ASSERT_EQ(sb.wait_exit(60s), 0) << sb.log();
  for (const Part* p : {&top, &bottom})
    ASSERT_EQ(wait_status(p->rig.control_ep,
                          [](const json& j) { return j.value("state", "") == "idle"; }, 30s)
                  ["state"],
              "idle")
        << da.log() << db.log();

  auto stats = ctl({"stats", "--json"}, top.rig.dir / "stats.log");
  ASSERT_EQ(stats->wait_exit(10s), 0) << stats->log();
  const json s = json::parse(stats->log());
  ASSERT_EQ(s["daemons"].size(), 2u);
  EXPECT_EQ(s["daemons"][0]["reply"]["frames"]["received"], 56);
  EXPECT_EQ(s["daemons"][1]["reply"]["frames"]["received"], 76);
  EXPECT_EQ(s["total"]["frames"]["received"], 132);
  EXPECT_EQ(s["total"]["frames"]["data"], 100);
  const uint64_t clusters = s["total"]["clusters"].get<uint64_t>();

  // Each run file records its modules; the clusters are local to them.
  const fs::path file_top = top.rig.file(1), file_bottom = bottom.rig.file(1);
  const pipeline::RunFileContents rt = pipeline::read_run_file(file_top);
  const pipeline::RunFileContents rb = pipeline::read_run_file(file_bottom);
  ASSERT_FALSE(rt.end_time.empty());
  ASSERT_FALSE(rb.end_time.empty());
  EXPECT_EQ(rt.clusters.n_clusters() + rb.clusters.n_clusters(), clusters);
  ASSERT_GT(rt.clusters.n_clusters(), 0u);
  auto text = ctl({"stats"}, top.rig.dir / "stats_text.log");
  ASSERT_EQ(text->wait_exit(10s), 0) << text->log();
  const auto count_of = [](const pipeline::RunFileContents& run, uint16_t id) {
    return std::count(run.cluster_module.begin(), run.cluster_module.end(), id);
  };
  EXPECT_NE(text->log().find(fmt::format("modules    clusters by module id  2: {}  3: {}",
                                         count_of(rb, 2), count_of(rb, 3))),
            std::string::npos)
      << text->log();
  // glint ctl stats counts each module's clusters, by module id, as the files hold them.
  for (const auto& [d, run] : {std::pair{0, &rt}, std::pair{1, &rb}}) {
    const json& mods = s["daemons"][d]["reply"]["modules"];
    ASSERT_EQ(mods.size(), 2u) << s.dump();
    for (std::size_t k = 0; k < 2; ++k) {
      const auto id = mods[k]["id"].get<uint16_t>();
      EXPECT_EQ(id, 2 * d + k);
      EXPECT_EQ(mods[k]["clusters"].get<std::size_t>(),
                static_cast<std::size_t>(std::count(run->cluster_module.begin(),
                                                    run->cluster_module.end(), id)));
    }
  }
  ASSERT_EQ(rb.modules.size(), 2u);
  EXPECT_EQ(rb.modules[1], (pipeline::ModuleInfo{3, {0, 24}, {32, 24}, {32, 24}}));
  for (std::size_t i = 0; i < rb.clusters.n_clusters(); ++i) {
    ASSERT_TRUE(rb.cluster_module[i] == 2 || rb.cluster_module[i] == 3);
    EXPECT_LT(rb.clusters.x()[i], 24);
  }

  const fs::path master = top.rig.dir / "master.h5";
  Process m({bin("glint").string(), "master", file_bottom.string(), file_top.string(),
             "--output", master.string()},
            top.rig.dir / "master.log");
  ASSERT_EQ(m.wait_exit(30s), 0) << m.log();
  EXPECT_NE(m.log().find("4 modules, detector 64 x 48, " + std::to_string(clusters) +
                         " clusters"),
            std::string::npos)
      << m.log();

  // One detector: the hit maps placed, the clusters one run after the other.
  std::vector<hsize_t> dims;
  const std::vector<double> hitmap = read_doubles(master, "entry/hitmap/counts", &dims);
  ASSERT_EQ(dims, (std::vector<hsize_t>{64, 48}));
  for (std::size_t i = 0; i < 32 * 48; ++i) {
    ASSERT_EQ(hitmap[i], double(rt.products.hitmap[i])) << i;
    ASSERT_EQ(hitmap[32 * 48 + i], double(rb.products.hitmap[i])) << i;
  }
  const std::vector<double> module = read_doubles(master, "entry/clusters/module");
  const std::vector<double> x = read_doubles(master, "entry/clusters/x");
  ASSERT_EQ(module.size(), clusters);
  const std::size_t nt = rt.clusters.n_clusters();
  for (std::size_t i = 0; i < clusters; ++i) {
    const bool in_top = i < nt;
    const std::size_t j = in_top ? i : i - nt;
    ASSERT_EQ(module[i], in_top ? rt.cluster_module[j] : rb.cluster_module[j]) << i;
    ASSERT_EQ(x[i], in_top ? rt.clusters.x()[j] : rb.clusters.x()[j]) << i;
  }
  const std::vector<double> noise = read_doubles(master, "entry/pedestal/end_noise");
  EXPECT_EQ(noise[5], rt.end_noise[5]);
  EXPECT_EQ(noise[40 * 48 + 7], rb.end_noise[8 * 48 + 7]);

  da.signal(SIGTERM);
  db.signal(SIGTERM);
  EXPECT_EQ(da.wait_exit(20s), 0) << da.log();
  EXPECT_EQ(db.wait_exit(20s), 0) << db.log();
}
