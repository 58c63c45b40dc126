#include "glint/daemon/control_security.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "glint/log.hpp"

namespace glint::daemon {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kZ85KeyLength = 40;

bool is_z85_key(const std::string& s) {
  if (s.size() != kZ85KeyLength) return false;
  std::array<uint8_t, 32> raw{};
  return zmq_z85_decode(raw.data(), s.c_str()) != nullptr;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// The (kind, key) pairs of a key file's lines: kind "public", "secret", or "" for a bare key.
std::vector<std::pair<std::string, std::string>> key_lines(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot be opened for reading", file.string()));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    // Z85 uses '#' and ':' too: a comment is a line starting with '#' that is not a key.
    if (line.empty() || (line.front() == '#' && !is_z85_key(line))) continue;
    std::string kind, key = line;
    for (const char* k : {"public:", "secret:"}) {
      if (line.size() > kZ85KeyLength && line.starts_with(k)) {
        kind = std::string(k, 6);
        key = trim(line.substr(7));
      }
    }
    if (kind.empty() && !is_z85_key(key))
      throw std::runtime_error(
          fmt::format("{}:{}: not a key line (allowed: 'public: KEY', 'secret: KEY', "
                      "a bare KEY of {} Z85 characters, '# comment')",
                      file.string(), n, kZ85KeyLength));
    if (!is_z85_key(key))
      throw std::runtime_error(fmt::format("{}:{}: not a CURVE key (expected {} Z85 characters)",
                                           file.string(), n, kZ85KeyLength));
    out.emplace_back(kind, key);
  }
  return out;
}

}  // namespace

bool curve_available() { return zmq_has("curve") != 0; }

CurveKeyPair generate_key_pair() {
  if (!curve_available()) throw std::runtime_error("this libzmq has no CURVE support (libsodium)");
  std::array<char, 41> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0)
    throw std::runtime_error(
        fmt::format("zmq_curve_keypair failed: {}", zmq_strerror(zmq_errno())));
  return CurveKeyPair{pub.data(), sec.data()};
}

void write_key_pair(const fs::path& file, const CurveKeyPair& keys) {
  auto write = [](const fs::path& path, const std::string& text, mode_t mode) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
      throw std::runtime_error(
          fmt::format("{}: cannot be created: {}", path.string(), std::strerror(errno)));
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw std::runtime_error(fmt::format("{}: write failed", path.string()));
  };
  const fs::path pub = fs::path(file.string() + ".pub");
  write(file,
        fmt::format("# glint CURVE key pair: keep secret\npublic: {}\nsecret: {}\n",
                    keys.public_key, keys.secret_key),
        0600);
  write(pub, fmt::format("public: {}\n", keys.public_key), 0644);
}

CurveKeyPair read_key_pair(const fs::path& file, bool need_secret) {
  CurveKeyPair k;
  for (const auto& [kind, key] : key_lines(file)) {
    if (kind == "secret")
      k.secret_key = key;
    else
      k.public_key = key;
  }
  if (k.public_key.empty() && !k.secret_key.empty()) {
    std::array<char, 41> pub{};
    if (zmq_curve_public(pub.data(), k.secret_key.c_str()) == 0) k.public_key = pub.data();
  }
  if (k.public_key.empty())
    throw std::runtime_error(fmt::format("{}: no 'public: KEY' line", file.string()));
  if (need_secret && k.secret_key.empty())
    throw std::runtime_error(
        fmt::format("{}: no 'secret: KEY' line (a key pair file from "
                    "`glint ctl keygen` is needed)",
                    file.string()));
  return k;
}

std::set<std::string> read_public_keys(const fs::path& where) {
  std::set<std::string> keys;
  auto read = [&](const fs::path& file) {
    for (const auto& [kind, key] : key_lines(file)) {
      if (kind == "secret")
        throw std::runtime_error(
            fmt::format("{}: holds a secret key; list public keys only (the "
                        ".pub file of `glint ctl keygen`)",
                        file.string()));
      keys.insert(key);
    }
  };
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(where, ec))
      if (e.is_regular_file() && !e.path().filename().string().starts_with("."))
        files.push_back(e.path());
    if (ec)
      throw std::runtime_error(
          fmt::format("{}: cannot be listed: {}", where.string(), ec.message()));
    for (const auto& f : files) read(f);
  } else {
    read(where);
  }
  return keys;
}

std::string public_key_from(const std::string& text) {
  if (is_z85_key(text)) return text;
  return read_key_pair(text, false).public_key;
}

struct ControlSecurity::Zap {
  zmq::socket_t sock;
  std::jthread thread;
};

ControlSecurity::ControlSecurity(const config::ControlConfig& c) : enabled_(c.curve()) {
  if (!enabled_) return;
  if (!curve_available())
    throw std::runtime_error(
        fmt::format("control.endpoint {}: CURVE is required but this libzmq "
                    "has no CURVE support",
                    c.endpoint));
  auto load = [](const char* key, auto fn) {
    try {
      return fn();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("control.{}: {}", key, e.what()));
    }
  };
  server_ = load("curve_server_key", [&] { return read_key_pair(c.curve_server_key, true); });
  struct stat st{};
  if (::stat(c.curve_server_key.c_str(), &st) == 0 && (st.st_mode & 0077) != 0)
    log::warn("control.curve_server_key {}: readable by others (mode {:o}); chmod 600 it",
              c.curve_server_key, st.st_mode & 0777);
  clients_ = load("curve_clients", [&] { return read_public_keys(c.curve_clients); });
  if (!c.curve_admins.empty()) {
    admins_listed_ = true;
    admins_ = load("curve_admins", [&] { return read_public_keys(c.curve_admins); });
  }
  if (clients_.empty())
    log::warn("control.curve_clients {} lists no keys: no client can connect", c.curve_clients);
}

ControlSecurity::~ControlSecurity() {
  if (zap_) {
    zap_->thread.request_stop();
    if (zap_->thread.joinable()) zap_->thread.join();
  }
}

void ControlSecurity::apply(zmq::context_t& ctx, zmq::socket_t& server) {
  if (!enabled_) return;
  zap_ = std::make_unique<Zap>();
  zap_->sock = zmq::socket_t(ctx, zmq::socket_type::rep);
  zap_->sock.set(zmq::sockopt::linger, 0);
  zap_->sock.bind("inproc://zeromq.zap.01");
  server.set(zmq::sockopt::curve_server, true);
  server.set(zmq::sockopt::curve_secretkey, server_.secret_key);
  server.set(zmq::sockopt::zap_domain, "glint");
  // The handler answers every handshake: a key in the list is let in with its Z85 text as the
  // User-Id (which the control requests then carry); any other is refused.
  zap_->thread = std::jthread([this](std::stop_token st) {
    auto& sock = zap_->sock;
    while (!st.stop_requested()) {
      zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
      try {
        if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
        std::vector<zmq::message_t> parts;
        do {
          zmq::message_t m;
          if (!sock.recv(m)) break;
          parts.push_back(std::move(m));
        } while (parts.back().more());
        if (parts.size() < 6) continue;  // not a ZAP request: nothing sensible to answer
        const std::string request_id = parts[1].to_string();
        const std::string mechanism = parts[5].to_string();
        std::string key;
        if (mechanism == "CURVE" && parts.size() >= 7 && parts[6].size() == 32) {
          std::array<char, 41> z85{};
          zmq_z85_encode(z85.data(), static_cast<const uint8_t*>(parts[6].data()), 32);
          key = z85.data();
        }
        const bool ok = !key.empty() && clients_.contains(key);
        if (!ok)
          log::warn(
              "control socket: refused a client from {} (key {} not in control.curve_clients)",
              parts[3].to_string(), key.empty() ? std::string("none") : key);
        sock.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
        sock.send(ok ? zmq::str_buffer("200") : zmq::str_buffer("400"), zmq::send_flags::sndmore);
        sock.send(ok ? zmq::str_buffer("OK") : zmq::str_buffer("key not allowed"),
                  zmq::send_flags::sndmore);
        sock.send(zmq::buffer(ok ? key : std::string()), zmq::send_flags::sndmore);
        sock.send(zmq::str_buffer(""), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        log::error("control socket ZAP handler: {}", e.what());
      }
    }
  });
}

bool ControlSecurity::allows(const std::string& client_key, const std::string& command) const {
  if (!enabled_) return true;
  if (!clients_.contains(client_key)) return false;
  if ((command == "shutdown" || command == "abort") && admins_listed_)
    return admins_.contains(client_key);
  return true;
}

}  // namespace glint::daemon
