#include "glint/daemon/preflight.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "glint/gpu/device.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/tv/forward_spec.hpp"

namespace glint::daemon {

namespace {

namespace fs = std::filesystem;

/// The host of a tcp:// endpoint ("tcp://[SOURCE;]HOST:PORT"; "[::1]" without brackets), or
/// empty for other transports.
std::string tcp_host(const std::string& ep) {
  if (!ep.starts_with("tcp://")) return {};
  std::string rest = ep.substr(6);
  if (const auto semi = rest.rfind(';'); semi != std::string::npos) rest = rest.substr(semi + 1);
  const auto colon = rest.rfind(':');
  std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

/// Why `dir` cannot take run files now, or empty: it must be a directory this process may
/// write, or not exist yet below one it may write (runs create it).
std::string directory_problem(const fs::path& dir) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  if (ec) return ec.message();
  while (!fs::exists(at, ec)) {
    if (!at.has_relative_path()) break;
    at = at.parent_path();
  }
  if (!fs::is_directory(at, ec))
    return fmt::format("{} is not a directory", log::one_line(at.string()));
  if (::access(at.c_str(), W_OK | X_OK) != 0)
    return fmt::format("{} is not writable by this process (uid {}): {}",
                       log::one_line(at.string()), ::geteuid(), std::strerror(errno));
  return {};
}

}  // namespace

Preflight preflight(const config::Config& c, bool mask_is_fatal) {
  Preflight p;
  auto add = [&](std::vector<config::ConfigError>& to, const std::string& key,
                 const std::string& what) {
    to.emplace_back(c.source, key, c.line(key), what);
  };

  if (const std::string why = directory_problem(c.output.directory); !why.empty())
    add(p.problems, "output.directory",
        fmt::format("'{}' cannot take run files: {} (allowed: a directory glintd may write, or "
                    "a path it may create)",
                    log::one_line(c.output.directory.string()), why));

  // ZeroMQ resolves a host name only when it connects, and retries for ever: a name that does
  // not resolve would leave the run waiting for dark frames that never come.
  std::set<std::string> seen;
  for (const auto& ep : c.ingest.endpoints) {
    const std::string host = tcp_host(ep);
    if (host.empty() || !seen.insert(host).second) continue;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (res) ::freeaddrinfo(res);
    if (rc != 0)
      add(p.problems, "ingest.endpoints",
          fmt::format("host '{}' of '{}' does not resolve ({}) (allowed: an IP address or a "
                      "host name this machine resolves)",
                      log::one_line(host), log::one_line(ep), ::gai_strerror(rc)));
  }

  const bool finder_gpu = c.finder.backend == "gpu";
  const bool recon_gpu = c.reconstruction.enabled && c.reconstruction.backend == "gpu";
  if (finder_gpu || recon_gpu) {
    if (const std::string why = gpu::unavailable_reason(); !why.empty())
      add(p.problems, finder_gpu ? "finder.backend" : "reconstruction.backend",
          fmt::format("gpu: the GPU backend cannot run here: {} (allowed here: cpu, or auto, "
                      "which takes the GPU when one is usable and else the CPU)",
                      why));
  }

  if (!c.mask.file.empty()) {
    try {
      pipeline::read_mask_file(c.mask.file, FrameShape{c.detector.rows, c.detector.cols});
    } catch (const std::exception& e) {
      add(p.problems, "mask.file",
          fmt::format("{} (allowed: FILE.h5:/dataset, an HDF5 file this process may read with "
                      "an integer dataset of detector.rows x detector.cols)",
                      log::one_line(e.what())));
    }
  }

  if (!c.products.subpixel_calibration.empty()) {
    try {
      pipeline::load_subpixel_calibration(c.products, c.finder.cluster_size);
    } catch (const std::exception& e) {
      // The message starts with the key; the problem names it once.
      std::string why = e.what();
      const std::string key = "products.subpixel.calibration: ";
      if (why.starts_with(key)) why.erase(0, key.size());
      add(p.problems, "products.subpixel.calibration", log::one_line(why));
    }
  }

  if (c.reconstruction.enabled) {
    tv::ForwardSpec spec;
    try {
      spec = tv::parse_forward_spec(c.reconstruction.forward);
    } catch (const std::exception&) {
    }  // the configuration's validation reports it
    if (spec.kind == tv::ForwardSpec::Kind::mask) {
      std::ifstream in(spec.file, std::ios::binary);
      std::error_code ec;
      if (!in || fs::is_directory(spec.file, ec))
        add(mask_is_fatal ? p.problems : p.warnings, "reconstruction.forward",
            fmt::format("mask file '{}' cannot be read ({}) (allowed: an HDF5 file this process "
                        "may read, mask:FILE.h5:/dataset)",
                        log::one_line(spec.file),
                        fs::is_directory(spec.file, ec) ? "it is a directory"
                                                        : std::strerror(errno)));
    }
  }
  return p;
}

void check_environment(const config::Config& c) {
  Preflight p = preflight(c);
  if (!p.ok()) throw p.problems.front();
}

}  // namespace glint::daemon
