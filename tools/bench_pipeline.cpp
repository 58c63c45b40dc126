// glint bench pipeline: the streaming pipeline's sustained rate over loopback, next to the
// transport floor (the same sender into a receiver that only counts bytes), measured in the
// same run.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "commands.hpp"
#include "glint/config/config.hpp"
#include "glint/detail/median.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/sls_stream.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "glint/daemon/tuning_env.hpp"

namespace glint::tools {

namespace {

using clock = std::chrono::steady_clock;

struct Leg {
  std::string name;
  uint64_t images_sent = 0;
  uint64_t frames = 0;    ///< images that arrived whole and were processed (or counted)
  uint64_t bytes = 0;     ///< pixel bytes of those frames
  uint64_t lost = 0;      ///< images sent that did not make it (any reason)
  double seconds = 0;     ///< first message received .. last frame done
  double fps() const { return seconds > 0 ? frames / seconds : 0; }
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  nlohmann::json extra = nlohmann::json::object();
};

/// Pixel bytes of one image on the wire.
uint64_t image_bytes(const pipeline::SimOptions& sim) {
  return pipeline::payload_bytes(sim.bitmode, std::size_t{sim.image.rows} * sim.image.cols);
}

/// The transport floor: SUB sockets that receive and count, nothing else.
Leg run_floor(const pipeline::SimOptions& sim, int rcvhwm) {
  Leg leg{"transport floor (receive + count)"};
  // One I/O thread per endpoint, as glintd's ingest has.
  zmq::context_t ctx(static_cast<int>(std::max<std::size_t>(sim.endpoints.size(), 1)));
  std::atomic<uint64_t> messages{0}, bytes{0}, ends{0};
  std::atomic<int64_t> first_ns{0}, last_ns{0};
  std::vector<std::jthread> threads;
  auto start_receivers = [&](const std::vector<std::string>& bound) {
    for (const auto& ep : bound) {
      threads.emplace_back([&, ep](std::stop_token st) {
        zmq::socket_t s(ctx, zmq::socket_type::sub);
        s.set(zmq::sockopt::rcvhwm, rcvhwm);
        s.set(zmq::sockopt::rcvtimeo, 100);
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::subscribe, "");
        s.connect(ep);
        while (!st.stop_requested()) {
          zmq::message_t m;
          if (!s.recv(m)) continue;
          const auto now = clock::now().time_since_epoch().count();
          int64_t zero = 0;
          first_ns.compare_exchange_strong(zero, now);
          uint64_t b = m.size();
          const bool single = !m.more();
          while (m.more()) {
            if (!s.recv(m)) break;
            b += m.size();
          }
          if (single) {  // the end message
            last_ns.store(now);
            ends.fetch_add(1);
            break;
          }
          messages.fetch_add(1, std::memory_order_relaxed);
          bytes.fetch_add(b, std::memory_order_relaxed);
        }
      });
    }
  };
  pipeline::SimOptions o = sim;
  o.on_bound = start_receivers;
  const auto rep = pipeline::run_stream_simulator(o);
  const auto until = clock::now() + std::chrono::seconds(30);
  while (ends.load() < sim.endpoints.size() && clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (auto& t : threads) t.request_stop();
  threads.clear();
  const uint64_t parts_per_image = uint64_t{sim.ports_x} * sim.ports_y;
  leg.images_sent = rep.images;
  leg.frames = messages.load() / parts_per_image;
  leg.bytes = leg.frames * image_bytes(sim);  // pixel bytes, as for the pipeline leg
  leg.extra["bytes_on_wire"] = bytes.load();
  leg.lost = rep.images > leg.frames ? rep.images - leg.frames : 0;
  leg.seconds = (last_ns.load() - first_ns.load()) / 1e9;
  leg.extra["sender_seconds"] = rep.seconds;
  return leg;
}

/// The real pipeline: ingest, assembly, finder, HDF5 writer.
Leg run_pipeline(const pipeline::SimOptions& sim, config::Config cfg) {
  Leg leg{cfg.reconstruction.enabled ? "glintd pipeline + reconstruction"
                                     : "glintd pipeline (ingest + find + write)"};
  // The sender binds first; the run connects to the addresses it got.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::vector<std::string>> bound;
  std::exception_ptr sender_error;
  pipeline::SimReport rep;
  pipeline::SimOptions o = sim;
  o.on_bound = [&](const std::vector<std::string>& eps) {
    std::lock_guard lock(mu);
    bound = eps;
    cv.notify_all();
  };
  std::jthread sender([&] {
    try {
      rep = pipeline::run_stream_simulator(o);
    } catch (...) {
      std::lock_guard lock(mu);
      sender_error = std::current_exception();
      bound.emplace();
      cv.notify_all();
    }
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return bound.has_value(); });
    if (sender_error) std::rethrow_exception(sender_error);
    cfg.ingest.endpoints = *bound;
  }
  pipeline::Acquisition run(cfg, 1, std::nullopt, {}, daemon::run_tuning_from_environment());
  clock::time_point first{}, last_frame{}, next_sample{};
  uint64_t frames_seen = 0;
  std::vector<uint64_t> received;  // messages received, every 50 ms from the first one
  std::vector<uint64_t> queued;    // images assembled and waiting for the run, at the same times
  while (!run.done()) {
    const auto s = run.stats();
    const auto now = clock::now();
    if (first == clock::time_point{} && s.messages > 0) first = next_sample = now;
    if (first != clock::time_point{} && now >= next_sample) {
      received.push_back(s.messages);
      queued.push_back(s.queued_images);
      next_sample += std::chrono::milliseconds(50);
    }
    if (s.dark_frames + s.data_frames != frames_seen) {
      frames_seen = s.dark_frames + s.data_frames;
      last_frame = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto last = clock::now();
  sender.join();
  if (sender_error) std::rethrow_exception(sender_error);
  const auto s = run.stats();
  if (!s.error.empty()) throw std::runtime_error("the run failed: " + s.error);
  leg.images_sent = rep.images;
  leg.frames = s.dark_frames + s.data_frames;
  leg.bytes = leg.frames * image_bytes(sim);
  leg.lost = rep.images > leg.frames ? rep.images - leg.frames : 0;
  leg.seconds = std::chrono::duration<double>(last - first).count();
  // The end of the run after its last frame was written (waiting for the last results, the end
  // pedestal, closing the file): part of leg.seconds, shown apart.
  const double closing =
      last_frame > first ? std::chrono::duration<double>(last - last_frame).count() : 0.0;
  leg.extra = {{"closing_seconds", closing},
               {"messages_every_50ms", received},
               {"queued_every_50ms", queued},   {"backend", s.backend},      {"dark", s.dark_frames},
               {"data", s.data_frames},
               {"clusters", s.clusters},       {"dropped", s.dropped},      {"missing", s.missing},
               {"incomplete", s.incomplete},   {"bad_input", s.bad_total},  {"file", s.file},
               {"sender_seconds", rep.seconds}};
  if (s.recon_enabled)
    leg.extra["reconstruction"] = {{"frames", s.recon_frames},
                                   {"volumes_done", s.recon_volumes_done},
                                   {"volumes_dropped", s.recon_volumes_dropped},
                                   {"volumes_failed", s.recon_volumes_failed}};
  return leg;
}

}  // namespace

void add_bench_pipeline(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("pipeline",
                                   "sender -> glintd pipeline over loopback vs. the transport floor");
  struct Args {
    uint32_t size = 400;
    uint64_t frames = 20000;
    uint64_t dark = 1000;
    uint32_t photons = 100;
    uint32_t ports = 1;
    std::string backend = "auto";
    unsigned threads = 0;
    int batch = 256;
    int streams = 2;
    uint32_t queue = 1024;
    int copy_threads = -1;
    // Per process: concurrent benches must not share (and remove) each other's run files.
    std::string output = std::filesystem::temp_directory_path() /
                         ("glint_bench_pipeline_" + std::to_string(::getpid()));
    int base_port = 0;
    int hwm = 1000;
    bool as_json = false;
    bool floor_only = false;
    bool malloc_defaults = false;
    uint32_t repeat = 1;                // rounds of the legs, medians reported
    uint32_t recon_slices = 0;          // 0: no reconstruction leg
    uint32_t recon_frames_per_slice = 100;
    std::string products;               // empty: glintd's defaults
    uint32_t modules = 0;               // 0: one image of --size and --ports
    uint32_t ports_per_module = 2;
    std::vector<int> gpus{0};
    uint32_t module_rows = 512, module_cols = 1024;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--size", a->size, "frame rows = columns")->capture_default_str();
  cmd->add_option("--frames", a->frames, "photon frames per leg")->capture_default_str();
  cmd->add_option("--dark", a->dark, "dark frames first (pedestal window)")->capture_default_str();
  cmd->add_option("--photons", a->photons, "photons per frame")->capture_default_str();
  cmd->add_option("--ports", a->ports, "ports (ZeroMQ endpoints) per image, stacked in y")->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu | gpu | auto")->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU backend threads, 0 = all")->capture_default_str();
  cmd->add_option("--batch", a->batch, "frames per finder batch")->capture_default_str();
  cmd->add_option("--streams", a->streams, "GPU streams")->capture_default_str();
  cmd->add_option("--queue", a->queue, "ingest.queue_frames")->capture_default_str();
  cmd->add_option("--copy-threads", a->copy_threads, "ingest.copy_threads, -1 = auto")->capture_default_str();
  cmd->add_option("--output", a->output, "directory for the run file (removed afterwards)")->capture_default_str();
  cmd->add_option("--base-port", a->base_port, "first TCP port on 127.0.0.1 (default: free ports)");
  cmd->add_option("--hwm", a->hwm, "ZeroMQ high-water mark, both sides (messages)")->capture_default_str();
  cmd->add_flag("--json", a->as_json, "print JSON");
  cmd->add_flag("--floor-only", a->floor_only, "measure the transport floor only");
  cmd->add_flag("--malloc-defaults", a->malloc_defaults,
                "keep glibc's default malloc thresholds in both legs instead of glintd's "
                "(for comparison; see pipeline::keep_receive_buffers)");
  cmd->add_option("--repeat", a->repeat,
                  "rounds of all legs, one after the other (the floor varies between runs; "
                  "medians and the ratio of the medians are reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--recon-slices", a->recon_slices,
                  "also run the pipeline with reconstruction on (volumes of this many slices, "
                  ">= 2), to compare with the leg without it; 0 = off")
      ->capture_default_str();
  cmd->add_option("--products", a->products,
                  "the products the pipeline leg computes, as glint find --products (all, or "
                  "hitmap,spectrum,eta,pixel_spectra,slices:N) [glintd's defaults: hit map, energy "
                  "image, spectrum, per-cluster energies]");
  cmd->add_option("--modules", a->modules,
                  "a detector of this many modules (instead of --size and --ports), two side by "
                  "side when even (JUNGFRAU 4M: --modules 8 --ports-per-module 2), each with its "
                  "own pedestal and finder, spread over the GPUs of --gpus");
  cmd->add_option("--ports-per-module", a->ports_per_module,
                  "with --modules: ports (ZeroMQ endpoints) per module, stacked in y")
      ->capture_default_str();
  cmd->add_option("--module-rows", a->module_rows, "with --modules: module rows")
      ->capture_default_str();
  cmd->add_option("--module-cols", a->module_cols, "with --modules: module columns")
      ->capture_default_str();
  cmd->add_option("--gpus", a->gpus, "finder.gpu_ids (modules in contiguous groups per entry)");
  cmd->add_option("--recon-frames-per-slice", a->recon_frames_per_slice,
                  "frames summed into one slice of the reconstruction leg")
      ->capture_default_str();
  cmd->callback([a] {
    // The detector: one image of --size with --ports stacked in y, or --modules modules.
    uint32_t rows = a->size, cols = a->size, ports_x = 1, ports_y = a->ports;
    uint32_t modules_x = 1, modules_y = 1;
    if (a->modules > 0) {
      if (a->ports_per_module == 0 || a->module_rows == 0 || a->module_cols == 0 ||
          a->module_rows % a->ports_per_module != 0)
        fail("glint bench pipeline", "--ports-per-module must divide --module-rows",
             kExitUsage);
      modules_x = a->modules % 2 == 0 ? 2 : 1;
      modules_y = a->modules / modules_x;
      rows = modules_y * a->module_rows;
      cols = modules_x * a->module_cols;
      ports_x = modules_x;
      ports_y = modules_y * a->ports_per_module;
      if (rows > 65536 || cols > 65536 || ports_x * ports_y > 64 * 64)
        fail("glint bench pipeline", "the detector is too large (at most 65536 x 65536 pixels)",
             kExitUsage);
    } else if (a->ports == 0 || a->size % a->ports != 0) {
      fail("glint bench pipeline", "--ports must divide --size", kExitUsage);
    }
    const uint32_t n_ports = ports_x * ports_y;
    // The endpoints of the next leg: fresh ports for every leg when --base-port is given.
    int next_port = a->base_port;
    auto endpoints = [&] {
      std::vector<std::string> eps;
      for (uint32_t p = 0; p < n_ports; ++p)
        eps.push_back(a->base_port > 0 ? fmt::format("tcp://127.0.0.1:{}", next_port++)
                                       : std::string("tcp://127.0.0.1:*"));
      return eps;
    };
    pipeline::SimOptions sim;
    sim.image.rows = rows;
    sim.image.cols = cols;
    sim.image.photons = a->photons;
    sim.ports_x = ports_x;
    sim.ports_y = ports_y;
    sim.dark_frames = a->dark;
    sim.frames = a->frames;
    sim.send_hwm = a->hwm;
    sim.image_pool = 64;
    // The sender waits at the high-water mark instead of dropping: it runs as fast as the
    // receiving side reads its socket. glintd's ingest never stops reading (it drops and counts
    // when the finder falls behind), so this measures the pipeline, not the sender.
    sim.block_at_hwm = true;
    sim.end_repeat = 3;

    config::Config cfg = config::parse("", "bench");
    cfg.detector.rows = rows;
    cfg.detector.cols = cols;
    cfg.detector.ports_x = ports_x;
    cfg.detector.ports_y = ports_y;
    cfg.detector.modules_x = modules_x;
    cfg.detector.modules_y = modules_y;
    cfg.finder.gpu_ids = a->gpus;
    cfg.ingest.queue_frames = a->queue;
    cfg.ingest.copy_threads = a->copy_threads;
    cfg.ingest.receive_hwm = a->hwm;
    cfg.pedestal.dark_frames = static_cast<uint32_t>(a->dark);
    cfg.pedestal.window = static_cast<uint32_t>(std::max<uint64_t>(a->dark, 1));
    cfg.finder.backend = a->backend;
    cfg.finder.threads = a->threads;
    cfg.finder.batch_frames = a->batch;
    cfg.finder.streams = a->streams;
    cfg.output.directory = a->output;
    cfg.output.run_name = "bench";
    cfg.output.overwrite = true;
    // A large detector's queue of images is large too (a JUNGFRAU 4M: 8.4 MB per image): the
    // bench host's memory, not glintd's default budget, is the limit.
    cfg.run.memory_budget_mb = std::max<uint64_t>(cfg.run.memory_budget_mb,
                                                  config::run_memory(cfg).total() / 1000000 + 1024);
    if (!a->products.empty()) {
      try {
        cfg.products = products_option(a->products, "", "sum");
      } catch (const std::invalid_argument& e) {
        fail("glint bench pipeline", e.what(), kExitUsage);
      }
    }
    if (a->recon_slices == 1 || a->recon_frames_per_slice == 0)
      fail("glint bench pipeline", "--recon-slices must be 0 or >= 2, --recon-frames-per-slice >= 1",
           kExitUsage);

    // Both legs with the allocator settings glintd runs with (set once for the process).
    if (!a->malloc_defaults) pipeline::keep_receive_buffers();
    // rounds[r] = {floor, pipeline, pipeline + reconstruction}, as far as asked for.
    std::vector<std::vector<Leg>> rounds;
    try {
      for (uint32_t r = 0; r < a->repeat; ++r) {
        std::vector<Leg> legs;
        sim.endpoints = endpoints();
        legs.push_back(run_floor(sim, a->hwm));
        if (!a->floor_only) {
          sim.endpoints = endpoints();
          legs.push_back(run_pipeline(sim, cfg));
          std::filesystem::remove_all(a->output);
          if (a->recon_slices > 0) {
            // Same sender, same run, with hit images stacked into volumes and reconstructed
            // beside cluster finding (on the finder's backend, lowest GPU stream priority).
            config::Config with = cfg;
            with.reconstruction.enabled = true;
            with.reconstruction.slices = a->recon_slices;
            with.reconstruction.frames_per_slice = a->recon_frames_per_slice;
            with.reconstruction.backend = a->backend;
            sim.endpoints = endpoints();
            legs.push_back(run_pipeline(sim, with));
            std::filesystem::remove_all(a->output);
          }
        }
        rounds.push_back(std::move(legs));
      }
    } catch (const std::exception& e) {
      fail("glint bench pipeline", e.what(), kExitFailure);
    }
    const std::size_t n_legs = rounds.front().size();
    // Median frames/s of leg i over the rounds.
    const auto median_fps = [&](std::size_t i) {
      std::vector<double> v;
      for (const auto& r : rounds) v.push_back(r[i].fps());
      return detail::median(std::move(v));
    };
    const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
    const double image_mb = image_bytes(sim) / 1e6;
    if (a->as_json) {
      nlohmann::json j = {{"size", a->size}, {"rows", rows}, {"cols", cols}, {"ports", n_ports},
                          {"modules", modules_x * modules_y}, {"frames", a->dark + a->frames},
                          {"image_mb", image_mb}, {"rounds", rounds.size()}};
      for (const auto& r : rounds) {
        nlohmann::json legs = nlohmann::json::array();
        for (const auto& l : r)
          legs.push_back({{"name", l.name}, {"images_sent", l.images_sent}, {"frames", l.frames},
                          {"lost", l.lost}, {"seconds", l.seconds}, {"frames_per_s", l.fps()},
                          {"gb_per_s", l.gbps()}, {"extra", l.extra}});
        j["round_legs"].push_back(legs);
      }
      j["legs"] = j["round_legs"].back();  // the last round, as with one round
      for (std::size_t i = 0; i < n_legs; ++i) j["median_frames_per_s"].push_back(median_fps(i));
      if (n_legs >= 2) j["ratio_to_floor"] = ratio(median_fps(1), median_fps(0));
      if (n_legs == 3) j["reconstruction_ratio"] = ratio(median_fps(2), median_fps(1));
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << fmt::format("glint bench pipeline: {}x{} uint16 ({:.2f} MB/image), {} port(s){}, {} "
                             "images ({} dark) per leg, loopback TCP{}\n",
                             rows, cols, image_mb, n_ports,
                             a->modules > 0 ? fmt::format(", {} modules ({} x {})",
                                                          modules_x * modules_y, modules_x,
                                                          modules_y)
                                            : std::string(),
                             a->dark + a->frames, a->dark,
                             rounds.size() > 1 ? fmt::format(", {} rounds", rounds.size()) : "");
    for (std::size_t r = 0; r < rounds.size(); ++r) {
      const auto& legs = rounds[r];
      if (rounds.size() > 1) std::cout << fmt::format(" round {}\n", r + 1);
      for (const auto& l : legs) {
        std::cout << fmt::format("  {:<42} {:>9.0f} frames/s  {:>6.2f} GB/s  lost {:>6}  ({:.2f} s", l.name,
                                 l.fps(), l.gbps(), l.lost, l.seconds);
        if (l.extra.contains("closing_seconds"))
          std::cout << fmt::format(", {:.3f} s of it after the last frame", l.extra["closing_seconds"].get<double>());
        std::cout << ")\n";
      }
      if (legs.size() >= 2) {
        const auto& x = legs[1].extra;
        std::cout << fmt::format("  backend {}; clusters {}; dropped {}, missing {}, incomplete {}\n",
                                 x["backend"].get<std::string>(), x["clusters"].get<uint64_t>(),
                                 x["dropped"].get<uint64_t>(), x["missing"].get<uint64_t>(),
                                 x["incomplete"].get<uint64_t>());
        std::cout << fmt::format("  pipeline / floor: {:.1f}%\n", 100.0 * ratio(legs[1].fps(), legs[0].fps()));
      }
      if (legs.size() == 3) {
        const auto& rec = legs[2].extra["reconstruction"];
        std::cout << fmt::format(
            "  with reconstruction: {:.1f}% of the rate without it, lost {} (without: {}); volumes "
            "done {}, dropped {}, failed {}\n",
            100.0 * ratio(legs[2].fps(), legs[1].fps()), legs[2].lost, legs[1].lost,
            rec["volumes_done"].get<uint64_t>(), rec["volumes_dropped"].get<uint64_t>(),
            rec["volumes_failed"].get<uint64_t>());
      }
    }
    if (rounds.size() > 1) {
      std::cout << fmt::format(" medians of {} rounds: floor {:.0f} frames/s", rounds.size(), median_fps(0));
      if (n_legs >= 2)
        std::cout << fmt::format(", pipeline {:.0f} frames/s, pipeline / floor {:.1f}%", median_fps(1),
                                 100.0 * ratio(median_fps(1), median_fps(0)));
      if (n_legs == 3)
        std::cout << fmt::format(", with reconstruction {:.0f} frames/s ({:.1f}% of without)",
                                 median_fps(2), 100.0 * ratio(median_fps(2), median_fps(1)));
      std::cout << "\n";
    }
  });
}

}  // namespace glint::tools
