#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "glint/config/config.hpp"

namespace gc = glint::config;

namespace {

const std::filesystem::path kExample = std::filesystem::path(GLINT_SOURCE_DIR) / "config/glintd.example.yaml";

/// Parses `text` expecting a ConfigError; returns it.
gc::ConfigError expect_error(const std::string& text) {
  try {
    gc::parse(text, "test.yaml");
  } catch (const gc::ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return gc::ConfigError("", "", 0, "");
}

}  // namespace

TEST(Config, ExampleEqualsDefaults) {
  const gc::Config ex = gc::load(kExample);
  const gc::Config def = gc::parse("", "empty");
  EXPECT_EQ(ex.detector.rows, def.detector.rows);
  EXPECT_EQ(ex.detector.cols, def.detector.cols);
  EXPECT_EQ(ex.detector.type, def.detector.type);
  EXPECT_EQ(ex.detector.ports_x, def.detector.ports_x);
  EXPECT_EQ(ex.ingest.endpoints, def.ingest.endpoints);
  EXPECT_EQ(ex.ingest.queue_frames, def.ingest.queue_frames);
  EXPECT_EQ(ex.ingest.reorder_frames, def.ingest.reorder_frames);
  EXPECT_EQ(ex.ingest.part_timeout_ms, def.ingest.part_timeout_ms);
  EXPECT_EQ(ex.ingest.receive_hwm, def.ingest.receive_hwm);
  EXPECT_EQ(ex.ingest.copy_threads, def.ingest.copy_threads);
  EXPECT_EQ(gc::parse("ingest: {copy_threads: 3}").ingest.copy_threads, 3);
  EXPECT_EQ(ex.pedestal.dark_frames, def.pedestal.dark_frames);
  EXPECT_EQ(ex.pedestal.keep_previous, def.pedestal.keep_previous);
  EXPECT_EQ(ex.pedestal.window, def.pedestal.window);
  EXPECT_EQ(ex.finder.n_sigma, def.finder.n_sigma);
  EXPECT_EQ(ex.finder.cluster_size, def.finder.cluster_size);
  EXPECT_EQ(ex.finder.backend, def.finder.backend);
  EXPECT_EQ(ex.finder.batch_frames, def.finder.batch_frames);
  EXPECT_EQ(ex.finder.gpu_ids, def.finder.gpu_ids);
  EXPECT_EQ(ex.output.directory, def.output.directory);
  EXPECT_EQ(ex.output.run_name, def.output.run_name);
  EXPECT_EQ(ex.output.flush_interval_ms, def.output.flush_interval_ms);
  EXPECT_EQ(ex.run.auto_start, def.run.auto_start);
  EXPECT_EQ(ex.run.max_frames, def.run.max_frames);
  EXPECT_EQ(ex.control.endpoint, def.control.endpoint);
  EXPECT_EQ(ex.logging.level, def.logging.level);
  EXPECT_EQ(ex.reconstruction.enabled, def.reconstruction.enabled);
  EXPECT_EQ(ex.reconstruction.lambda, def.reconstruction.lambda);
  EXPECT_EQ(ex.reconstruction.frames_per_slice, def.reconstruction.frames_per_slice);
  EXPECT_EQ(ex.reconstruction.slices, def.reconstruction.slices);
  EXPECT_EQ(ex.reconstruction.weight, def.reconstruction.weight);
  EXPECT_EQ(ex.reconstruction.forward, def.reconstruction.forward);
  EXPECT_EQ(ex.reconstruction.outer, def.reconstruction.outer);
  EXPECT_EQ(ex.reconstruction.tv_inner, def.reconstruction.tv_inner);
  EXPECT_EQ(ex.reconstruction.cold_start, def.reconstruction.cold_start);
  EXPECT_EQ(ex.reconstruction.nonneg, def.reconstruction.nonneg);
  EXPECT_EQ(ex.reconstruction.variant, def.reconstruction.variant);
  EXPECT_EQ(ex.reconstruction.backend, def.reconstruction.backend);
  EXPECT_EQ(ex.reconstruction.solve_partial, def.reconstruction.solve_partial);
  EXPECT_EQ(ex.mask.file, def.mask.file);
  EXPECT_EQ(ex.mask.from_dark, def.mask.from_dark);
  EXPECT_EQ(ex.mask.noisy_factor, def.mask.noisy_factor);
  EXPECT_FALSE(ex.mask.enabled());
  EXPECT_EQ(ex.source, kExample.string());
  EXPECT_NE(ex.yaml.find("detector:"), std::string::npos);
}

TEST(Config, ReadsValues) {
  const auto c = gc::parse(R"(
detector: {type: jungfrau, rows: 512, cols: 1024, ports: [1, 2]}
ingest:
  endpoints: [tcp://127.0.0.1:30001, tcp://127.0.0.1:30002]
  queue_frames: 64
pedestal: {dark_frames: 30, keep_previous: true, window: 20}
finder: {n_sigma: 3.5, cluster_size: 5, backend: cpu, threads: 4, gpu_ids: [0, 1]}
output: {directory: /tmp/x, run_name: scan, flush_interval_ms: 200}
run: {auto_start: true, max_frames: 100, max_seconds: 2.5}
control: {endpoint: "tcp://127.0.0.1:6000"}
logging: {level: debug}
reconstruction: {enabled: true, frames_per_slice: 7, slices: 3, lambda: 0.5, weight: signal,
                 forward: "gaussian:1.5,1,2", outer: 5, tv_inner: 4, cold_start: true,
                 nonneg: false, variant: fused-march, backend: cpu, solve_partial: true}
)");
  EXPECT_EQ(c.detector.type, "jungfrau");
  EXPECT_EQ(c.detector.rows, 512u);
  EXPECT_EQ(c.detector.cols, 1024u);
  EXPECT_EQ(c.detector.ports_y, 2u);
  EXPECT_EQ(c.detector.port_rows(), 256u);
  EXPECT_EQ(c.detector.port_cols(), 1024u);
  ASSERT_EQ(c.ingest.endpoints.size(), 2u);
  EXPECT_EQ(c.ingest.endpoints[1], "tcp://127.0.0.1:30002");
  EXPECT_EQ(c.ingest.queue_frames, 64u);
  EXPECT_EQ(c.pedestal.dark_frames, 30u);
  EXPECT_TRUE(c.pedestal.keep_previous);
  EXPECT_EQ(c.pedestal.window, 20u);
  EXPECT_DOUBLE_EQ(c.finder.n_sigma, 3.5);
  EXPECT_EQ(c.finder.cluster_size, 5);
  EXPECT_EQ(c.finder.backend, "cpu");
  EXPECT_EQ(c.finder.threads, 4u);
  EXPECT_EQ(c.finder.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.output.directory, "/tmp/x");
  EXPECT_EQ(c.output.run_name, "scan");
  EXPECT_EQ(c.output.flush_interval_ms, 200u);
  EXPECT_TRUE(c.run.auto_start);
  EXPECT_EQ(c.run.max_frames, 100u);
  EXPECT_DOUBLE_EQ(c.run.max_seconds, 2.5);
  EXPECT_EQ(c.control.endpoint, "tcp://127.0.0.1:6000");
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_TRUE(c.reconstruction.enabled);
  EXPECT_EQ(c.reconstruction.frames_per_slice, 7u);
  EXPECT_EQ(c.reconstruction.slices, 3u);
  EXPECT_DOUBLE_EQ(c.reconstruction.lambda, 0.5);
  EXPECT_EQ(c.reconstruction.weight, "signal");
  EXPECT_EQ(c.reconstruction.forward, "gaussian:1.5,1,2");
  EXPECT_EQ(c.reconstruction.outer, 5u);
  EXPECT_EQ(c.reconstruction.tv_inner, 4u);
  EXPECT_TRUE(c.reconstruction.cold_start);
  EXPECT_FALSE(c.reconstruction.nonneg);
  EXPECT_EQ(c.reconstruction.variant, "fused-march");
  EXPECT_EQ(c.reconstruction.backend, "cpu");
  // The effective YAML carries every reconstruction key.
  const auto again = gc::parse(gc::to_yaml(c));
  EXPECT_EQ(again.reconstruction.forward, "gaussian:1.5,1,2");
  EXPECT_EQ(again.reconstruction.variant, "fused-march");
  EXPECT_EQ(again.reconstruction.weight, "signal");
  EXPECT_EQ(again.reconstruction.tv_inner, 4u);
  EXPECT_TRUE(again.reconstruction.cold_start);
  EXPECT_FALSE(again.reconstruction.nonneg);
  EXPECT_TRUE(again.reconstruction.solve_partial);
  const gc::Config m =
      gc::parse("mask: {file: \"/d/m.h5:/entry/pixel_mask\", from_dark: true, noisy_factor: 3}");
  EXPECT_EQ(m.mask.file, "/d/m.h5:/entry/pixel_mask");
  EXPECT_TRUE(m.mask.from_dark);
  EXPECT_EQ(m.mask.noisy_factor, 3.0);
  EXPECT_TRUE(m.mask.enabled());
  EXPECT_EQ(gc::parse("reconstruction: {forward: \"mask:/data/m.h5:/mask\"}\n").reconstruction.forward,
            "mask:/data/m.h5:/mask");
}

TEST(Config, UnknownKeyNamesKeyLineAndAllowed) {
  auto e = expect_error("detector:\n  rows: 400\n  colz: 400\n");
  EXPECT_EQ(e.key(), "detector.colz");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("test.yaml:3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("cols"), std::string::npos) << e.what();

  e = expect_error("detector: {}\nfindr: {}\n");
  EXPECT_EQ(e.key(), "findr");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("finder"), std::string::npos) << e.what();
}

TEST(Config, BadValuesNameKeyLineAndAllowed) {
  struct Case {
    const char* text;
    const char* key;
    int line;
    const char* allowed;
  };
  const Case cases[] = {
      {"finder:\n  cluster_size: 4\n", "finder.cluster_size", 2, "3, 5, 7, 9"},
      {"finder:\n  cluster_size: 11\n", "finder.cluster_size", 2, "3 to 9"},
      {"finder:\n\n  backend: tpu\n", "finder.backend", 3, "cpu, gpu, auto"},
      {"finder:\n  n_sigma: -1\n", "finder.n_sigma", 2, "(0"},
      {"finder:\n  n_sigma: abc\n", "finder.n_sigma", 2, "not a number"},
      {"finder:\n  threads: 2.5\n", "finder.threads", 2, "not an integer"},
      {"finder:\n  gpu_ids: [a]\n", "finder.gpu_ids", 2, "0..63"},
      {"pedestal:\n  dark_frames: -3\n", "pedestal.dark_frames", 2, "0 to"},
      {"pedestal:\n  keep_previous: maybe\n", "pedestal.keep_previous", 2, "true, false"},
      {"detector:\n  pixel_type: float\n", "detector.pixel_type", 2, "uint16"},
      {"detector:\n  rows: 400\n  ports: [3, 1]\n", "detector.ports", 3, "evenly"},
      {"detector:\n  ports: [1]\n", "detector.ports", 2, "[x, y]"},
      {"detector:\n  ports: [1, 2]\n  modules: [1, 3]\n", "detector.modules", 3, "whole ports"},
      {"detector:\n  modules: [0, 1]\n", "detector.modules", 2, "1 to 64"},
      {"detector:\n  ports: [2, 1]\n  modules: [2, 1]\n  module_orientation: upside_down\n",
       "detector.module_orientation", 4,
       "'upside_down' is not an orientation (allowed: normal, flip_rows, flip_cols, rotate_180)"},
      {"detector:\n  ports: [2, 1]\n  modules: [2, 1]\n  module_orientation: [flip_rows, up]\n",
       "detector.module_orientation", 4, "'up' is not an orientation"},
      {"detector:\n  ports: [2, 2]\n  modules: [2, 2]\n"
       "  module_orientation: [flip_rows, normal, normal]\n",
       "detector.module_orientation", 4,
       "3 entries for the 4 modules of detector.modules [2, 2]: give one orientation for all "
       "modules, or one per module"},
      {"detector:\n  module_orientation: []\n", "detector.module_orientation", 2,
       "0 entries for the 1 modules"},
      {"detector:\n  module_orientation: {a: 1}\n", "detector.module_orientation", 2,
       "one orientation for all modules, or a list"},
      {"detector:\n  placement:\n    origin: [300, 0]\n    detector_shape: [600, 400]\n"
       "    first_module: 1\n  rows: 400\n",
       "detector.placement.origin", 3, "outside the 600x400 detector"},
      {"detector:\n  placement:\n    detector_shape: [600, 0]\n",
       "detector.placement.detector_shape", 3, "rows and cols"},
      {"ingest:\n  endpoints: [udp://x:1]\n", "ingest.endpoints", 2, "tcp://"},
      {"ingest:\n  endpoints: tcp://127.0.0.1:1\n", "ingest.endpoints", 2, "list"},
      {"output:\n  run_name: a/b\n", "output.run_name", 2, "'/'"},
      {"output:\n  flush_interval_ms: 5000\n", "output.flush_interval_ms", 2, "10 to 1000"},
      {"logging:\n  level: loud\n", "logging.level", 2, "trace, debug"},
      {"control:\n  endpoint: localhost\n", "control.endpoint", 2, "tcp://"},
      {"reconstruction:\n  lambda: -1\n", "reconstruction.lambda", 2, "[0"},
      {"ingest:\n  copy_threads: many\n", "ingest.copy_threads", 2, "0 to 64"},
      {"reconstruction:\n  slices: 1\n", "reconstruction.slices", 2, "2 to 4096"},
      {"reconstruction:\n  frames_per_slice: 0\n", "reconstruction.frames_per_slice", 2, "1 to"},
      {"reconstruction:\n  weight: photons\n", "reconstruction.weight", 2, "centres, signal"},
      {"reconstruction:\n  forward: blur\n", "reconstruction.forward", 2, "gaussian:SX,SY,SZ"},
      {"reconstruction:\n  forward: \"gaussian:1,2\"\n", "reconstruction.forward", 2, "identity"},
      {"reconstruction:\n  forward: \"gaussian:1,-1,2\"\n", "reconstruction.forward", 2, "not a non-negative number"},
      {"reconstruction:\n  forward: \"mask:m.h5\"\n", "reconstruction.forward", 2, "mask:FILE.h5:/dataset"},
      {"reconstruction:\n  outer: 0\n", "reconstruction.outer", 2, "1 to"},
      {"reconstruction:\n  tv_inner: x\n", "reconstruction.tv_inner", 2, "not an integer"},
      {"reconstruction:\n  cold_start: warm\n", "reconstruction.cold_start", 2, "true, false"},
      {"reconstruction:\n  nonneg: 2\n", "reconstruction.nonneg", 2, "true, false"},
      {"reconstruction:\n  variant: fastest\n", "reconstruction.variant", 2, "two-state"},
      {"reconstruction:\n  backend: tpu\n", "reconstruction.backend", 2, "cpu, gpu, auto"},
      {"reconstruction:\n  iterations: 100\n", "reconstruction.iterations", 2, "tv_inner"},
      {"reconstruction:\n  forward: \"mask:m.h5:/mask\"\n  solve_partial: true\n",
       "reconstruction.solve_partial", 3, "mask forward model"},
      {"run:\n  max_seconds: -1\n", "run.max_seconds", 2, "[0"},
      {"detector: 5\n", "detector", 1, "mapping"},
      {"mask:\n  file: m.h5\n", "mask.file", 2, "FILE.h5:/dataset"},
      {"mask:\n  file: \"m.h5:mask\"\n", "mask.file", 2, "FILE.h5:/dataset"},
      {"mask:\n  from_dark: yes please\n", "mask.from_dark", 2, "true, false"},
      {"mask:\n  from_dark: true\n  noisy_factor: 0.5\n", "mask.noisy_factor", 3, "[1"},
      {"mask:\n  from_dark: true\n  noisy_factor: lots\n", "mask.noisy_factor", 3,
       "not a number"},
      {"mask:\n  dead: true\n", "mask.dead", 2, "from_dark"},
      {"mask: [a]\n", "mask", 1, "mapping"},
  };
  for (const auto& c : cases) {
    auto e = expect_error(c.text);
    EXPECT_EQ(e.key(), c.key) << c.text;
    EXPECT_EQ(e.line(), c.line) << c.text;
    EXPECT_NE(std::string(e.what()).find(c.allowed), std::string::npos) << e.what();
  }
}

TEST(Config, SyntaxErrorAndMissingFile) {
  auto e = expect_error("detector:\n  rows: [1,\n");
  EXPECT_GT(e.line(), 0);
  try {
    gc::load("/nonexistent/glintd.yaml");
    FAIL() << "no error for a missing file";
  } catch (const gc::ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("/nonexistent/glintd.yaml"), std::string::npos);
  }
}

TEST(Config, OverridesMergeAndValidate) {
  const auto base = gc::parse("detector: {rows: 100, cols: 200}\noutput: {run_name: a}\n", "base.yaml");
  const auto c = gc::with_overrides(base, R"({"output": {"run_name": "b"}, "run": {"max_frames": 7}})");
  EXPECT_EQ(c.detector.rows, 100u);
  EXPECT_EQ(c.detector.cols, 200u);
  EXPECT_EQ(c.output.run_name, "b");
  EXPECT_EQ(c.run.max_frames, 7u);
  // The effective YAML round-trips.
  const auto again = gc::parse(c.yaml);
  EXPECT_EQ(again.output.run_name, "b");
  EXPECT_EQ(again.detector.cols, 200u);
  try {
    gc::with_overrides(base, R"({"finder": {"cluster_size": 2}})");
    FAIL() << "bad override accepted";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "finder.cluster_size");
  }
  try {
    gc::with_overrides(base, R"({"output": {"colour": 1}})");
    FAIL() << "unknown override key accepted";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "output.colour");
  }
}

TEST(Config, ToYamlRoundTripsEveryValue) {
  auto c = gc::load(kExample);
  c.detector.rows = 512;
  c.detector.ports_y = 2;
  c.detector.modules_y = 2;
  c.detector.detector_rows = 1024;
  c.detector.detector_cols = 400;
  c.detector.origin_row = 512;
  c.detector.first_module = 2;
  c.ingest.endpoints = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"};
  c.finder.n_sigma = 4.123456789012345;
  c.finder.gpu_ids = {1, 3};
  c.output.directory = "/tmp/a b";
  c.run.max_seconds = 0.1;
  c.reconstruction.lambda = 1e-7;
  c.reconstruction.forward = "gaussian:2,2,1";
  c.pedestal.keep_previous = true;
  c.ingest.copy_threads = 2;
  c.mask.file = "/data/m.h5:/entry/mask";
  c.mask.from_dark = true;
  c.mask.noisy_factor = 7.5;
  c.detector.module_orientation = {"flip_rows", "normal"};
  const auto b = gc::parse(gc::to_yaml(c));
  EXPECT_EQ(gc::to_yaml(b), gc::to_yaml(c));
  EXPECT_EQ(b.detector.module_orientation, (std::vector<std::string>{"flip_rows", "normal"}));
  EXPECT_EQ(b.detector.rows, 512u);
  EXPECT_EQ(b.detector.ports_y, 2u);
  EXPECT_EQ(b.detector.n_modules(), 2u);
  EXPECT_EQ(b.detector.module_rows(), 256u);
  EXPECT_EQ(b.detector.whole_rows(), 1024u);
  EXPECT_EQ(b.detector.origin_row, 512u);
  EXPECT_EQ(b.detector.first_module, 2u);
  EXPECT_TRUE(b.detector.has_modules());
  EXPECT_FALSE(gc::parse("").detector.has_modules());
  EXPECT_EQ(b.ingest.endpoints, c.ingest.endpoints);
  EXPECT_EQ(b.finder.n_sigma, c.finder.n_sigma);
  EXPECT_EQ(b.finder.gpu_ids, c.finder.gpu_ids);
  EXPECT_EQ(b.output.directory, c.output.directory);
  EXPECT_EQ(b.run.max_seconds, 0.1);
  EXPECT_EQ(b.reconstruction.lambda, 1e-7);
  EXPECT_TRUE(b.pedestal.keep_previous);
  EXPECT_EQ(b.ingest.copy_threads, 2);
  EXPECT_EQ(b.mask.file, "/data/m.h5:/entry/mask");
  EXPECT_TRUE(b.mask.from_dark);
  EXPECT_EQ(b.mask.noisy_factor, 7.5);
  // Overrides apply on top of values changed in the struct.
  const auto o = gc::with_overrides(c, "{run: {max_frames: 3}}");
  EXPECT_EQ(o.detector.rows, 512u);
  EXPECT_EQ(o.run.max_frames, 3u);
}

TEST(Config, RunNamesAreSafeFileNamePrefixes) {
  for (const char* ok : {"run", "scan-7.v2_b", "A", "x.h5"}) {
    EXPECT_TRUE(gc::is_safe_run_name(ok)) << ok;
    EXPECT_EQ(gc::parse(std::string("output: {run_name: \"") + ok + "\"}\n").output.run_name, ok);
  }
  EXPECT_TRUE(gc::is_safe_run_name(std::string(64, 'a')));
  EXPECT_FALSE(gc::is_safe_run_name(std::string(65, 'a')));
  // YAML's "\0" is a NUL: HDF5 would cut the path there and open run_000001.h5 itself.
  const std::vector<std::array<std::string, 3>> bad = {
      {R"("run_000001.h5\0")", "run_000001.h5\\x00", "it contains '\\x00'"},
      {R"("a/b")", "a/b", "it contains '/'"},
      {R"("a\nb")", "a\\x0ab", "it contains '\\x0a'"},
      {R"("..")", "..", "it starts with '.'"},
      {R"(".hidden")", ".hidden", "it starts with '.'"},
      {R"("a..b")", "a..b", "it contains '..'"},
      {R"("a b")", "a b", "it contains ' '"},
      {R"("x/../../etc/x")", "x/../../etc/x", "it contains '..'"},
      {"\"" + std::string(65, 'r') + "\"", std::string(65, 'r'), "it is 65 characters long"},
  };
  for (const auto& [yaml, shown, why] : bad) {
    auto e = expect_error("# comment\noutput:\n  run_name: " + yaml + "\n");
    EXPECT_EQ(e.key(), "output.run_name") << yaml;
    EXPECT_EQ(e.line(), 3) << yaml;
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + shown + "' is not allowed: " + why + " (allowed: "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("A-Z a-z 0-9 . _ -, not starting with '.', no '..'"), std::string::npos)
        << what;
    EXPECT_EQ(what.find('\0'), std::string::npos);
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
  // A NUL in the directory is refused too.
  auto e = expect_error("output: {directory: \"/tmp/a\\0b\"}\n");
  EXPECT_EQ(e.key(), "output.directory");
}

TEST(Config, OverridesRefuseAnUnsafeRunName) {
  const auto base = gc::parse("output: {run_name: a}\n", "base.yaml");
  // The request from the issue: JSON's \u0000 is a NUL too.
  try {
    gc::with_overrides(base,
                       R"({"output": {"run_name": "run_000001.h5\u0000", "overwrite": true}})");
    FAIL() << "a NUL in run_name accepted";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "output.run_name");
    EXPECT_NE(std::string(e.what()).find("'run_000001.h5\\x00' is not allowed"), std::string::npos)
        << e.what();
  }
  try {
    gc::with_overrides(base, R"({"output": {"run_name": "x\ny"}})");
    FAIL() << "a newline in run_name accepted";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "output.run_name");
  }
}

TEST(Config, OverrideDirectoriesStayWithinTheRoots) {
  namespace fs = std::filesystem;
  const fs::path top = fs::temp_directory_path() / ("glint_roots_" + std::to_string(::getpid()));
  fs::remove_all(top);
  fs::create_directories(top / "root" / "sub");
  fs::create_directories(top / "outside");
  fs::create_directories(top / "configured");
  fs::create_symlink(top / "outside", top / "root" / "link");
  const auto base = gc::parse("output: {directory: \"" + (top / "configured").string() +
                                  "\", allowed_roots: [\"" + (top / "root").string() + "\"]}\n",
                              "base.yaml");
  EXPECT_TRUE(gc::directory_within(top / "root", base.output.allowed_roots));
  EXPECT_TRUE(gc::directory_within(top / "root" / "sub", base.output.allowed_roots));
  EXPECT_TRUE(gc::directory_within(top / "root" / "new" / "dir", base.output.allowed_roots));
  EXPECT_FALSE(gc::directory_within(top / "root" / "link", base.output.allowed_roots));
  EXPECT_FALSE(gc::directory_within(top / "root" / "link" / "new", base.output.allowed_roots));
  EXPECT_FALSE(gc::directory_within(top / "root" / ".." / "outside", base.output.allowed_roots));
  EXPECT_FALSE(gc::directory_within(top / "rootx", base.output.allowed_roots));
  EXPECT_FALSE(gc::directory_within("/etc/glint-attack-test", base.output.allowed_roots));
  auto dir_override = [&](const fs::path& d) {
    return gc::with_overrides(base, "{\"output\": {\"directory\": \"" + d.string() + "\"}}");
  };
  EXPECT_EQ(dir_override(top / "root" / "sub").output.directory, top / "root" / "sub");
  // The configured directory itself is trusted, though it is not under a root.
  EXPECT_EQ(dir_override(top / "configured").output.directory, top / "configured");
  for (const fs::path& escape :
       {top / "root" / ".." / "outside", top / "root" / "link", top / "root" / "link" / "deeper",
        fs::path("/etc/glint-attack-test"), top / "configured" / "below"}) {
    try {
      dir_override(escape);
      ADD_FAILURE() << escape << " accepted";
    } catch (const gc::ConfigError& e) {
      EXPECT_EQ(e.key(), "output.directory") << escape;
      EXPECT_NE(std::string(e.what()).find("is not within output.allowed_roots (allowed: " +
                                           (top / "root").string() + " or below"),
                std::string::npos)
          << e.what();
    }
  }
  fs::remove_all(top);
}

TEST(Config, OverridesAreAnAllowList) {
  const auto base = gc::parse("detector: {rows: 100, cols: 200}\n", "base.yaml");
  for (const char* text :
       {R"({"ingest": {"endpoints": ["tcp://10.0.0.1:1"]}})",
        R"({"control": {"endpoint": "tcp://*:1"}})", R"({"detector": {"rows": 4096}})",
        R"({"ingest": {"queue_frames": 1048576}})", R"({"finder": {"batch_frames": 65536}})",
        R"({"finder": {"gpu_ids": [1]}})", R"({"output": {"allowed_roots": ["/"]}})",
        R"({"run": {"memory_budget_mb": 100000}})", R"({"run": {"auto_start": true}})",
        R"({"logging": {"level": "off"}})", R"({"finder": {"threads": 1024}})"}) {
    const std::string t = text;
    const auto s0 = t.find('"') + 1;
    const auto s1 = t.find('"', s0);
    const auto k0 = t.find('"', s1 + 1) + 1;
    const std::string key = t.substr(s0, s1 - s0) + "." + t.substr(k0, t.find('"', k0) - k0);
    try {
      gc::with_overrides(base, text);
      ADD_FAILURE() << text << " accepted";
    } catch (const gc::ConfigError& e) {
      EXPECT_EQ(e.key(), key) << text;
      EXPECT_NE(std::string(e.what()).find("cannot be changed by a start override (allowed: "
                                           "output.run_name, output.directory"),
                std::string::npos)
          << e.what();
    }
  }
  // Every listed key is accepted.
  const auto c = gc::with_overrides(
      base, R"({"output": {"run_name": "x", "overwrite": true, "flush_interval_ms": 50},
               "run": {"max_frames": 5, "max_seconds": 2.5},
               "pedestal": {"dark_frames": 10, "keep_previous": true, "window": 10},
               "finder": {"n_sigma": 4, "cluster_size": 5, "backend": "cpu"},
               "reconstruction": {"enabled": true, "slices": 8},
               "mask": {"file": "m.h5:/mask", "from_dark": true, "noisy_factor": 4}})");
  EXPECT_EQ(c.finder.cluster_size, 5);
  EXPECT_EQ(c.mask.file, "m.h5:/mask");
  EXPECT_TRUE(c.mask.from_dark);
  EXPECT_EQ(c.mask.noisy_factor, 4.0);
  EXPECT_EQ(c.reconstruction.slices, 8u);
  EXPECT_EQ(c.pedestal.window, 10u);
  EXPECT_EQ(gc::override_keys().size(), 24u);
}

TEST(Config, ARunOverTheMemoryBudgetIsRefusedWithTheFigure) {
  // The default detector: 544 MB in all (GPU figures counted with backend auto).
  const auto def = gc::run_memory(gc::parse(""));
  EXPECT_EQ(def.assembler, 384ull * 400 * 400 * 2);
  EXPECT_EQ(def.batch, 256ull * 400 * 400 * 2);
  EXPECT_EQ(def.pinned, 2 * def.batch);
  EXPECT_EQ(def.device, def.pinned + 400ull * 400 * 24);
  EXPECT_EQ(def.pedestal, 400ull * 400 * 48);
  EXPECT_EQ(def.reconstruction, 0u);
  EXPECT_EQ(def.describe(),
            "544 MB (assembler 123 MB, batch 82 MB, pinned staging 164 MB, device "
            "168 MB, pedestal 8 MB, reconstruction 0 MB)");
  // The issue's 4096 x 4096 detector with a 1M-frame queue.
  const std::string big =
      "# a big one\ndetector: {rows: 4096, cols: 4096}\n"
      "ingest: {queue_frames: 1048576}\n";
  auto e = expect_error(big + "run: {max_frames: 10}\n");
  EXPECT_EQ(e.key(), "run.memory_budget_mb");
  EXPECT_EQ(e.line(), 4);  // the run section (no memory_budget_mb key)
  EXPECT_NE(
      std::string(e.what()).find("the run needs 35232825 MB (assembler 35188668 MB, batch 8590 MB, "
                                 "pinned staging 17180 MB, device 17583 MB, pedestal 806 MB, "
                                 "reconstruction 0 MB) but the budget is 8192 MB"),
      std::string::npos)
      << e.what();
  // The budget is the operator's to raise; with_overrides cannot.
  e = expect_error(big + "run:\n  max_frames: 10\n  memory_budget_mb: 20000\n");
  EXPECT_EQ(e.line(), 6);
  EXPECT_NE(std::string(e.what()).find("but the budget is 20000 MB"), std::string::npos)
      << e.what();
  EXPECT_EQ(gc::parse(big + "run: {memory_budget_mb: 40000000}\n").ingest.queue_frames, 1048576u);
  // A reconstruction volume from an override counts too.
  const auto base = gc::parse("detector: {rows: 1024, cols: 1024}\nfinder: {backend: cpu}\n");
  try {
    gc::with_overrides(base, R"({"reconstruction": {"enabled": true, "slices": 4096}})");
    FAIL() << "a 1024 x 1024 x 4096 reconstruction accepted";
  } catch (const gc::ConfigError& err) {
    EXPECT_EQ(err.key(), "run.memory_budget_mb");
    EXPECT_NE(std::string(err.what()).find("reconstruction 240519 MB) but the budget is 8192 MB"),
              std::string::npos)
        << err.what();
  }
  gc::Config c = gc::parse("");
  c.detector.rows = c.detector.cols = 4096;
  c.ingest.queue_frames = 1 << 20;
  EXPECT_THROW(gc::check_memory_budget(c), gc::ConfigError);
}

TEST(Config, ControlOffLoopbackNeedsCurve) {
  for (const char* ep : {"tcp://127.0.0.1:5555", "tcp://127.1.2.3:1", "tcp://localhost:5555",
                         "tcp://[::1]:5555", "ipc:///run/glint/ctl", "tcp://127.0.0.1:*"})
    EXPECT_TRUE(gc::is_loopback_endpoint(ep)) << ep;
  for (const char* ep :
       {"tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "tcp://eth0:5555",
        "tcp://127.0.0.1.evil.com:5555", "tcp://[::]:5555", "tcp://1270.0.0.1:1"})
    EXPECT_FALSE(gc::is_loopback_endpoint(ep)) << ep;
  auto e = expect_error("control:\n  endpoint: tcp://*:5555\n");
  EXPECT_EQ(e.key(), "control.curve_server_key");
  EXPECT_NE(std::string(e.what()).find("CURVE is required"), std::string::npos) << e.what();
  e = expect_error("control:\n  require_curve: true\n  curve_server_key: /etc/glint/server.key\n");
  EXPECT_EQ(e.key(), "control.curve_clients");
  e = expect_error("control:\n  curve_admins: /etc/glint/admins\n");
  EXPECT_EQ(e.key(), "control.curve_admins");
  const auto c =
      gc::parse("control: {endpoint: \"tcp://*:5555\", curve_server_key: /k, curve_clients: /c}\n");
  EXPECT_TRUE(c.control.curve());
  EXPECT_FALSE(gc::parse("").control.curve());
  e = expect_error("control: {max_request_bytes: 100}\n");
  EXPECT_EQ(e.key(), "control.max_request_bytes");
}

TEST(Config, MetricsSectionIsLoopbackOnly) {
  const gc::Config def = gc::parse("", "empty");
  EXPECT_FALSE(def.metrics.enabled);
  EXPECT_EQ(def.metrics.listen, "127.0.0.1:9464");
  const gc::Config ex = gc::load(kExample);
  EXPECT_EQ(ex.metrics.enabled, def.metrics.enabled);
  EXPECT_EQ(ex.metrics.listen, def.metrics.listen);

  const gc::Config c = gc::parse("metrics: {enabled: true, listen: \"[::1]:19464\"}\n");
  EXPECT_TRUE(c.metrics.enabled);
  EXPECT_EQ(gc::split_listen(c.metrics.listen), (std::pair<std::string, uint16_t>{"::1", 19464}));
  EXPECT_EQ(gc::split_listen("localhost:80"), (std::pair<std::string, uint16_t>{"127.0.0.1", 80}));
  EXPECT_EQ(gc::split_listen("127.1.2.3:65535"),
            (std::pair<std::string, uint16_t>{"127.1.2.3", 65535}));
  EXPECT_EQ(gc::parse(gc::to_yaml(c)).metrics.listen, "[::1]:19464");

  for (const char* bad : {"0.0.0.0:9464", "10.0.0.1:9464", "[::]:9464", "127.0.0.1",
                          "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:+80", "127.0.0.256:80",
                          "127.0.0.1.5:80", "example.org:9464", ":9464", "127. 0.0.1:80"}) {
    const auto e = expect_error(std::string("metrics:\n  listen: \"") + bad + "\"\n");
    EXPECT_EQ(e.key(), "metrics.listen") << bad;
    EXPECT_EQ(e.line(), 2) << bad;
    EXPECT_NE(std::string(e.what()).find("allowed: 127.x.x.x:PORT"), std::string::npos) << e.what();
  }
  EXPECT_EQ(expect_error("metrics: {enabled: true, port: 9464}\n").key(), "metrics.port");
}

TEST(Config, PedestalDarkMarker) {
  EXPECT_EQ(gc::parse("", "empty").pedestal.dark_marker, "none");
  EXPECT_EQ(gc::load(kExample).pedestal.dark_marker, "none");
  auto c = gc::parse("pedestal:\n  dark_marker: frame_mode\n");
  EXPECT_EQ(c.pedestal.dark_marker, "frame_mode");
  EXPECT_EQ(gc::parse(gc::to_yaml(c)).pedestal.dark_marker, "frame_mode");
  const auto e = expect_error("pedestal:\n  window: 10\n  dark_marker: pedestal\n");
  EXPECT_EQ(e.key(), "pedestal.dark_marker");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("none, frame_mode"), std::string::npos) << e.what();
}

TEST(Config, StreamFaultBoundsHaveDocumentedDefaultsAndRanges) {
  const gc::Config ex = gc::load(kExample);
  const gc::Config def = gc::parse("", "empty");
  EXPECT_EQ(ex.ingest.max_frame_jump, def.ingest.max_frame_jump);
  EXPECT_EQ(def.ingest.max_frame_jump, 1000000u);
  EXPECT_EQ(ex.run.max_missing_rows, def.run.max_missing_rows);
  EXPECT_EQ(def.run.max_missing_rows, 10000000u);
  EXPECT_EQ(ex.run.idle_end_seconds, def.run.idle_end_seconds);
  EXPECT_EQ(def.run.idle_end_seconds, 60.0);
  const auto c = gc::parse("ingest: {max_frame_jump: 5}\nrun: {max_missing_rows: 7, "
                           "idle_end_seconds: 0.5}\n");
  EXPECT_EQ(c.ingest.max_frame_jump, 5u);
  EXPECT_EQ(c.run.max_missing_rows, 7u);
  EXPECT_EQ(c.run.idle_end_seconds, 0.5);
  EXPECT_EQ(gc::parse(gc::to_yaml(c)).run.idle_end_seconds, 0.5);
  EXPECT_EQ(gc::parse(gc::to_yaml(c)).ingest.max_frame_jump, 5u);
  struct Case {
    const char* text;
    const char* key;
    const char* allowed;
  };
  const Case cases[] = {
      {"ingest:\n  max_frame_jump: 0\n", "ingest.max_frame_jump", "1 to"},
      {"ingest:\n  max_frame_jump: 2e12\n", "ingest.max_frame_jump", "not an integer"},
      {"run:\n  max_missing_rows: 0\n", "run.max_missing_rows", "1 to"},
      {"run:\n  idle_end_seconds: -1\n", "run.idle_end_seconds", "[0"},
      {"run:\n  idle_end_seconds: soon\n", "run.idle_end_seconds", "not a number"},
  };
  for (const auto& k : cases) {
    auto e = expect_error(k.text);
    EXPECT_EQ(e.key(), k.key) << k.text;
    EXPECT_EQ(e.line(), 2) << k.text;
    EXPECT_NE(std::string(e.what()).find(k.allowed), std::string::npos) << e.what();
  }
}

TEST(Config, DarkFramesMustFillThePedestalWindow) {
  // As `glint find`: fewer dark frames than the window leave the pedestal unsettled.
  auto e = expect_error("pedestal:\n  dark_frames: 10\n  window: 1000\n");
  EXPECT_EQ(e.key(), "pedestal.dark_frames");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("10 is fewer than pedestal.window = 1000"),
            std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("allowed: at least 1000, or 0 with keep_previous: true"),
            std::string::npos) << e.what();
  // The default window (1000) counts too.
  e = expect_error("pedestal:\n\n  dark_frames: 999\n");
  EXPECT_EQ(e.key(), "pedestal.dark_frames");
  EXPECT_EQ(e.line(), 3);
  // 0 dark frames: only with keep_previous.
  e = expect_error("pedestal: {dark_frames: 0}\n");
  EXPECT_EQ(e.key(), "pedestal.dark_frames");
  EXPECT_EQ(e.line(), 1);
  EXPECT_NE(std::string(e.what()).find("without a pedestal"), std::string::npos) << e.what();
  const auto keep = gc::parse("pedestal: {dark_frames: 0, keep_previous: true, window: 50}\n");
  EXPECT_EQ(keep.pedestal.dark_frames, 0u);
  EXPECT_EQ(keep.pedestal.window, 50u);
  EXPECT_EQ(gc::parse("pedestal: {dark_frames: 50, window: 50}\n").pedestal.dark_frames, 50u);
  // A start override is held to the same rule.
  const auto base = gc::parse("pedestal: {dark_frames: 20, window: 20}\n", "base.yaml");
  try {
    gc::with_overrides(base, R"({"pedestal": {"dark_frames": 5}})");
    FAIL() << "5 dark frames for a window of 20 accepted";
  } catch (const gc::ConfigError& err) {
    EXPECT_EQ(err.key(), "pedestal.dark_frames");
  }
}

TEST(Config, KeysGivenTwiceAreRefusedAtAnyLevel) {
  auto e = expect_error("detector: {rows: 40, cols: 40}\nrun: {}\ndetector: {rows: 80}\n");
  EXPECT_EQ(e.key(), "detector");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(std::string(e.what()).find("given twice (first on line 1)"), std::string::npos)
      << e.what();
  e = expect_error("finder:\n  n_sigma: 4\n  backend: cpu\n  n_sigma: 6\n");
  EXPECT_EQ(e.key(), "finder.n_sigma");
  EXPECT_EQ(e.line(), 4);
  EXPECT_NE(std::string(e.what()).find("first on line 2"), std::string::npos) << e.what();
}

TEST(Config, EndpointsNeedAHostAndAPortInRange) {
  struct Case {
    const char* text;
    const char* key;
    const char* what;
  };
  const Case cases[] = {
      {"ingest:\n  endpoints: [\"tcp://127.0.0.1:99999\"]\n", "ingest.endpoints",
       "port '99999' is out of range (allowed: tcp://HOST:PORT with PORT 1..65535, ipc://PATH)"},
      {"ingest:\n  endpoints: [\"tcp://127.0.0.1:0\"]\n", "ingest.endpoints", "port '0'"},
      {"ingest:\n  endpoints: [\"tcp://127.0.0.1\"]\n", "ingest.endpoints", "no HOST:PORT"},
      {"ingest:\n  endpoints: [\"tcp://:30001\"]\n", "ingest.endpoints", "no HOST:PORT"},
      {"ingest:\n  endpoints: [\"tcp://*:30001\"]\n", "ingest.endpoints", "no host to connect"},
      {"ingest:\n  endpoints: [\"tcp://127.0.0.1:*\"]\n", "ingest.endpoints", "port '*'"},
      {"ingest:\n  endpoints: [\"ipc://\"]\n", "ingest.endpoints", "has no path"},
      {"control:\n  endpoint: \"tcp://127.0.0.1:70000\"\n", "control.endpoint",
       "PORT 1..65535 or *"},
  };
  for (const auto& c : cases) {
    auto e = expect_error(c.text);
    EXPECT_EQ(e.key(), c.key) << c.text;
    EXPECT_EQ(e.line(), 2) << c.text;
    EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
  }
  // glintd binds the control endpoint: a "*" port picks a free one.
  EXPECT_EQ(gc::parse("control: {endpoint: \"tcp://127.0.0.1:*\"}\n").control.endpoint,
            "tcp://127.0.0.1:*");
}

TEST(Config, DirectoryAndEmptyFilesAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / "glint_config_files";
  std::filesystem::create_directories(dir);
  auto load_error = [](const std::filesystem::path& p) {
    try {
      gc::load(p);
    } catch (const gc::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(load_error(dir), dir.string() +
                                 ": (file): is a directory (expected a YAML file, e.g. "
                                 "config/glintd.example.yaml)");
  for (const char* text : {"", "# only a comment\n", "{}\n"}) {
    std::ofstream(dir / "empty.yaml") << text;
    EXPECT_NE(load_error(dir / "empty.yaml").find(": (file): holds no configuration"),
              std::string::npos)
        << text;
  }
  std::ofstream(dir / "one.yaml") << "run: {max_frames: 3}\n";
  const auto c = gc::load(dir / "one.yaml");
  EXPECT_EQ(c.run.max_frames, 3u);
  EXPECT_EQ(c.line("run.max_frames"), 1);
  EXPECT_EQ(c.line("output.directory"), 0);
}

TEST(Config, JungfrauCalibration) {
  const auto c = gc::parse("detector:\n  type: jungfrau\ncalibration:\n  gain_file: /c/gains.bin\n"
                           "  pedestal_file: /c/ped.bin\n  hg0: true\n");
  EXPECT_EQ(c.calibration.gain_file, "/c/gains.bin");
  EXPECT_EQ(c.calibration.pedestal_file, "/c/ped.bin");
  EXPECT_TRUE(c.calibration.hg0);
  EXPECT_EQ(c.calibration.units, "keV");
  EXPECT_TRUE(c.calibration.calibrated());
  const auto again = gc::parse(gc::to_yaml(c));
  EXPECT_EQ(again.calibration.gain_file, "/c/gains.bin");
  EXPECT_TRUE(again.calibration.hg0);
  EXPECT_FALSE(gc::parse("detector: {type: jungfrau}\n").calibration.calibrated());

  struct Case {
    const char* text;
    const char* key;
    int line;
    const char* allowed;
  };
  const Case cases[] = {
      {"detector:\n  type: moench\ncalibration:\n  gain_file: g.bin\n", "calibration.gain_file",
       4, "detector.type jungfrau only"},
      {"detector:\n  type: jungfrau\ncalibration:\n  pedestal_file: p.bin\n",
       "calibration.pedestal_file", 4, "needs calibration.gain_file"},
      {"detector:\n  type: jungfrau\ncalibration:\n  hg0: true\n", "calibration.hg0", 4,
       "needs calibration.gain_file"},
      {"detector:\n  type: jungfrau\ncalibration:\n  gain_file: g.bin\n  units: ADU\n",
       "calibration.units", 5, "keV"},
      {"calibration:\n  gains: g.bin\n", "calibration.gains", 2, "gain_file"},
      {"detector:\n  type: jungfrau\ncalibration:\n  gain_file: g.bin\npedestal:\n"
       "  keep_previous: true\n",
       "pedestal.keep_previous", 6, "allowed: false"},
  };
  for (const auto& k : cases) {
    auto e = expect_error(k.text);
    EXPECT_EQ(e.key(), k.key) << k.text;
    EXPECT_EQ(e.line(), k.line) << k.text;
    EXPECT_NE(std::string(e.what()).find(k.allowed), std::string::npos) << e.what();
  }
}

TEST(Config, PedestalSource) {
  EXPECT_EQ(gc::parse("").pedestal.source, "dark");
  const auto c = gc::parse("pedestal:\n  source: file:/p/dark.h5\n");
  EXPECT_EQ(c.pedestal.file(), "/p/dark.h5");
  EXPECT_FALSE(c.pedestal.from_previous());
  EXPECT_EQ(gc::parse(gc::to_yaml(c)).pedestal.source, "file:/p/dark.h5");
  EXPECT_TRUE(gc::parse("pedestal: {source: previous}").pedestal.from_previous());
  EXPECT_TRUE(gc::parse("pedestal: {keep_previous: true}").pedestal.from_previous());
  auto e = expect_error("pedestal:\n  source: \"file:\"\n");
  EXPECT_EQ(e.key(), "pedestal.source");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("dark, previous, file:PATH"), std::string::npos);
  e = expect_error("pedestal:\n  keep_previous: true\n  source: file:x.h5\n");
  EXPECT_EQ(e.key(), "pedestal.keep_previous");
  e = expect_error("detector: {type: jungfrau}\ncalibration: {gain_file: g.bin}\n"
                   "pedestal:\n  source: previous\n");
  EXPECT_EQ(e.key(), "pedestal.source");
  EXPECT_EQ(e.line(), 4);
}

// ---- preview: the live view's socket and rate ----

TEST(Config, PreviewDefaultsAreTheDocumentedOnes) {
  const gc::Config def = gc::parse("", "empty");
  EXPECT_TRUE(def.preview.enabled);
  EXPECT_EQ(def.preview.endpoint, "tcp://127.0.0.1:5556");
  EXPECT_EQ(def.preview.rate_hz, 2.0);
  EXPECT_EQ(def.preview.hwm, 2);
  EXPECT_TRUE(def.preview.images.empty());
  EXPECT_TRUE(def.preview.sends("hitmap"));
  const gc::Config ex = gc::load(kExample);
  EXPECT_EQ(ex.preview.enabled, def.preview.enabled);
  EXPECT_EQ(ex.preview.endpoint, def.preview.endpoint);
  EXPECT_EQ(ex.preview.rate_hz, def.preview.rate_hz);
  EXPECT_EQ(ex.preview.hwm, def.preview.hwm);
  EXPECT_EQ(ex.preview.images, def.preview.images);
}

TEST(Config, PreviewReadsAndRoundTripsValues) {
  const auto c = gc::parse("preview:\n  enabled: false\n  endpoint: tcp://127.0.0.1:*\n"
                           "  rate_hz: 0.5\n  hwm: 7\n  images: [hitmap, noise]\n");
  EXPECT_FALSE(c.preview.enabled);
  EXPECT_EQ(c.preview.endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(c.preview.rate_hz, 0.5);
  EXPECT_EQ(c.preview.hwm, 7);
  EXPECT_EQ(c.preview.images, (std::vector<std::string>{"hitmap", "noise"}));
  EXPECT_TRUE(c.preview.sends("noise"));
  EXPECT_FALSE(c.preview.sends("pedestal"));
  const auto b = gc::parse(gc::to_yaml(c));
  EXPECT_EQ(b.preview.enabled, false);
  EXPECT_EQ(b.preview.endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(b.preview.rate_hz, 0.5);
  EXPECT_EQ(b.preview.hwm, 7);
  EXPECT_EQ(b.preview.images, c.preview.images);
  EXPECT_EQ(gc::parse("preview: {endpoint: \"ipc:///tmp/glint-preview\"}").preview.endpoint,
            "ipc:///tmp/glint-preview");
}

TEST(Config, PreviewBadValuesNameKeyLineAndAllowed) {
  struct Case {
    std::string text, key;
    int line;
    std::string allowed;
  };
  const std::vector<Case> cases = {
      {"preview:\n  endpoint: udp://1.2.3.4:5\n", "preview.endpoint", 2, "tcp://HOST:*"},
      {"preview:\n  endpoint: tcp://127.0.0.1:70000\n", "preview.endpoint", 2, "1..65535"},
      {"preview:\n  endpoint: \"\"\n", "preview.endpoint", 2, "must not be empty"},
      {"preview:\n  rate_hz: 0\n", "preview.rate_hz", 2, "(0, 100]"},
      {"preview:\n  rate_hz: 101\n", "preview.rate_hz", 2, "(0, 100]"},
      {"preview:\n  hwm: 0\n", "preview.hwm", 2, "1 to 1000"},
      {"preview:\n  images: [hitmap, \"Hit Map\"]\n", "preview.images", 2, "a-z 0-9 _"},
      {"preview:\n  images: hitmap\n", "preview.images", 2, "expected a list"},
      {"preview:\n  enabled: maybe\n", "preview.enabled", 2, "true, false"},
      {"preview:\n  rate: 2\n", "preview.rate", 2, "rate_hz"},
  };
  for (const auto& k : cases) {
    auto e = expect_error(k.text);
    EXPECT_EQ(e.key(), k.key) << k.text;
    EXPECT_EQ(e.line(), k.line) << k.text;
    EXPECT_NE(std::string(e.what()).find(k.allowed), std::string::npos) << e.what();
  }
}

TEST(Config, ProductsDefaultsValuesAndErrors) {
  const gc::Config ex = gc::load(kExample);
  const gc::Config def = gc::parse("", "empty");
  for (const gc::Config* c : {&ex, &def}) {
    EXPECT_EQ(c->products.energy, "sum");
    EXPECT_TRUE(c->products.energy_window.empty());
    EXPECT_TRUE(c->products.hitmap);
    EXPECT_EQ(c->products.slice_frames, 0u);
    EXPECT_EQ(c->products.spectrum_bins, 500u);
    EXPECT_EQ(c->products.spectrum_min, 0.0);
    EXPECT_EQ(c->products.spectrum_max, 0.0);
    EXPECT_FALSE(c->products.pixel_spectra);
    EXPECT_FALSE(c->products.eta);
    EXPECT_EQ(c->products.eta_bins, 100u);
    EXPECT_EQ(c->products.subpixel_calibration, "");
    EXPECT_EQ(c->products.subpixel_factor, 5u);
    EXPECT_TRUE(c->products.cluster_energy);
    EXPECT_EQ(c->products.threads, -1);
    EXPECT_EQ(c->products.device, "auto");
  }
  EXPECT_EQ(def.products.spectrum_upper(false), 2000.0);
  EXPECT_EQ(def.products.spectrum_upper(true), 50.0);

  const auto c = gc::parse(
      "products:\n  energy: 2x2\n  energy_window: [2.5, 40]\n  hitmap: false\n"
      "  slice_frames: 100\n  spectrum: {bins: 64, min: 1, max: 60}\n  pixel_spectra: true\n"
      "  eta: true\n  eta_bins: 20\n  subpixel: {calibration: /data/eta.h5, factor: 8}\n"
      "  cluster_energy: false\n  threads: 3\n  device: gpu\n");
  EXPECT_EQ(c.products.energy, "2x2");
  EXPECT_EQ(c.products.energy_window, (std::vector<double>{2.5, 40}));
  EXPECT_FALSE(c.products.hitmap);
  EXPECT_EQ(c.products.slice_frames, 100u);
  EXPECT_EQ(c.products.spectrum_bins, 64u);
  EXPECT_EQ(c.products.spectrum_min, 1.0);
  EXPECT_EQ(c.products.spectrum_upper(true), 60.0);
  EXPECT_TRUE(c.products.pixel_spectra);
  EXPECT_TRUE(c.products.eta);
  EXPECT_EQ(c.products.eta_bins, 20u);
  EXPECT_EQ(c.products.subpixel_calibration, "/data/eta.h5");
  EXPECT_EQ(c.products.subpixel_factor, 8u);
  EXPECT_FALSE(c.products.cluster_energy);
  EXPECT_EQ(c.products.threads, 3);
  EXPECT_EQ(c.products.device, "gpu");
  EXPECT_EQ(gc::parse("products: {device: cpu}\n").products.device, "cpu");
  // Round trip, and as a start override (not the worker threads).
  const auto b = gc::parse(gc::to_yaml(c));
  EXPECT_EQ(gc::to_yaml(b), gc::to_yaml(c));
  EXPECT_EQ(b.products.energy_window, c.products.energy_window);
  const auto o = gc::with_overrides(
      def, R"({"products": {"energy_window": [10, 20], "eta": true, "spectrum": {"bins": 9}}})");
  EXPECT_EQ(o.products.energy_window, (std::vector<double>{10, 20}));
  EXPECT_TRUE(o.products.eta);
  EXPECT_EQ(o.products.spectrum_bins, 9u);
  EXPECT_EQ(o.products.spectrum_min, 0.0);
  try {
    gc::with_overrides(def, R"({"products": {"threads": 8}})");
    ADD_FAILURE() << "products.threads accepted as an override";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "products.threads");
  }
  try {
    gc::with_overrides(def, R"({"products": {"device": "cpu"}})");
    ADD_FAILURE() << "products.device accepted as an override";
  } catch (const gc::ConfigError& e) {
    EXPECT_EQ(e.key(), "products.device");
  }

  struct Bad {
    const char* yaml;
    const char* key;
    int line;
    const char* what;
  };
  for (const Bad& b : std::initializer_list<Bad>{
           {"products:\n  energy: 3x3\n", "products.energy", 2, "allowed: sum, 2x2"},
           {"products:\n  energy_window: [5, 1]\n", "products.energy_window", 2,
            "[5, 1]: emin must be below emax"},
           {"products:\n  energy_window: [5, 5]\n", "products.energy_window", 2,
            "emin must be below emax"},
           {"products:\n  energy_window: [5]\n", "products.energy_window", 2,
            "has 1 values (allowed: [] for no window, or [emin, emax])"},
           {"products:\n  energy_window: [a, 2]\n", "products.energy_window", 2,
            "expected [emin, emax]: two finite numbers"},
           {"products:\n  spectrum: {bins: 0}\n", "products.spectrum.bins", 2,
            "0 is out of range (allowed: 1 to 100000)"},
           {"products:\n  spectrum: {bins: 100001}\n", "products.spectrum.bins", 2,
            "out of range"},
           {"products:\n  spectrum: {min: 10, max: 5}\n", "products.spectrum.max", 2,
            "5 is not above products.spectrum.min = 10"},
           {"products:\n  spectrum: {min: 2500}\n", "products.spectrum.min", 2,
            "is not below the default max (2000 ADU)"},
           {"products:\n  spectrum: {bns: 5}\n", "products.spectrum.bns", 2, "unknown key"},
           {"products:\n  slice_frames: -1\n", "products.slice_frames", 2, "out of range"},
           {"products:\n  eta_bins: 0\n", "products.eta_bins", 2, "out of range"},
           {"products:\n  subpixel: {factor: 0}\n", "products.subpixel.factor", 2,
            "out of range"},
           {"products:\n  threads: 0\n", "products.threads", 2, "out of range (allowed: 1 to 64)"},
           {"detector: {rows: 2000, cols: 2000}\nproducts:\n  pixel_spectra: true\n",
            "products.pixel_spectra", 3, "2000 x 2000 pixels x 500 bins is more than"},
           {"products:\n  device: cuda\n", "products.device", 2,
            "allowed: auto, cpu, gpu"},
           {"products:\n  device: 1\n", "products.device", 2, "allowed: auto, cpu, gpu"},
           {"products:\n  colour: red\n", "products.colour", 2, "unknown key"}}) {
    const gc::ConfigError e = expect_error(b.yaml);
    EXPECT_EQ(e.key(), b.key) << b.yaml;
    EXPECT_EQ(e.line(), b.line) << b.yaml;
    EXPECT_NE(std::string(e.what()).find(b.what), std::string::npos) << e.what();
  }
}

TEST(Config, ModuleOrientation) {
  const char* grid = "detector:\n  rows: 400\n  ports: [2, 2]\n  modules: [2, 2]\n";
  // One value for all modules, a list with one per module; all normal is the default (and is
  // not written back, so that such a run records the configuration it always did).
  EXPECT_TRUE(gc::parse("").detector.module_orientation.empty());
  const auto one = gc::parse(std::string(grid) + "  module_orientation: rotate_180\n");
  EXPECT_EQ(one.detector.module_orientation, std::vector<std::string>{"rotate_180"});
  EXPECT_NE(gc::to_yaml(one).find("module_orientation: rotate_180"), std::string::npos);
  const auto each = gc::parse(std::string(grid) +
                              "  module_orientation: [flip_rows, flip_rows, normal, flip_cols]\n");
  EXPECT_EQ(each.detector.module_orientation,
            (std::vector<std::string>{"flip_rows", "flip_rows", "normal", "flip_cols"}));
  const auto normal =
      gc::parse(std::string(grid) + "  module_orientation: [normal, normal, normal, normal]\n");
  EXPECT_TRUE(normal.detector.module_orientation.empty());
  EXPECT_EQ(gc::to_yaml(normal), gc::to_yaml(gc::parse(grid)));
  EXPECT_EQ(gc::to_yaml(gc::parse(grid)).find("module_orientation"), std::string::npos);
}
