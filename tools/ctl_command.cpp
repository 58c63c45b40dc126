// glint ctl: talks to glintd's control socket.
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "commands.hpp"
#include "glint/config/config.hpp"
#include "glint/daemon/control_security.hpp"
#include "glint/log.hpp"

namespace glint::tools {

using nlohmann::json;

namespace {

/// The client's CURVE keys, when glintd's control socket uses CURVE.
struct ClientKeys {
  daemon::CurveKeyPair own;
  std::string server_public;
  bool enabled() const { return !server_public.empty(); }
};

/// One request/reply exchange on a fresh REQ socket (a REQ socket that got no answer cannot send
/// again); throws std::runtime_error when glintd does not answer.
json request(zmq::context_t& ctx, const std::string& endpoint, const json& req, int timeout_ms,
             const ClientKeys& keys) {
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, timeout_ms);
  s.set(zmq::sockopt::sndtimeo, timeout_ms);
  if (keys.enabled()) {
    s.set(zmq::sockopt::curve_serverkey, keys.server_public);
    s.set(zmq::sockopt::curve_publickey, keys.own.public_key);
    s.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
  }
  s.connect(endpoint);
  s.send(zmq::buffer(req.dump()), zmq::send_flags::none);
  zmq::message_t rep;
  if (!s.recv(rep))
    throw std::runtime_error(fmt::format(
        "no answer from glintd at {} within {} ms{}: is glintd running there? (--endpoint "
        "ENDPOINT or --config GLINTD.yaml for its control.endpoint; --timeout-ms to wait longer)",
        endpoint, timeout_ms,
        keys.enabled() ? " (is this client's key in its control.curve_clients?)" : ""));
  json j = json::parse(rep.to_string(), nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("glintd sent a reply that is not JSON");
  return j;
}

std::string num(const json& j, const char* key) {
  if (!j.contains(key)) return "-";
  const auto& v = j[key];
  if (v.is_number_float()) return fmt::format("{:.1f}", v.get<double>());
  return v.dump();
}

/// Where a client connects for glintd's bound control endpoint: a wildcard host ("*", 0.0.0.0,
/// [::]) is reached on loopback.
std::string connect_endpoint(const std::string& bound) {
  for (const auto& [any, local] : {std::pair{"tcp://*:", "tcp://127.0.0.1:"},
                                   std::pair{"tcp://0.0.0.0:", "tcp://127.0.0.1:"},
                                   std::pair{"tcp://[::]:", "tcp://[::1]:"}})
    if (bound.starts_with(any)) return local + bound.substr(std::string_view(any).size());
  return bound;
}

void print_human(const std::string& cmd, const json& r) {
  if (cmd == "config") {
    std::cout << "# " << r.value("source", "") << "\n" << r.value("yaml", "");
    return;
  }
  if (cmd == "stats") {
    const auto& f = r["frames"];
    const auto& q = r["queues"];
    const auto& rt = r["rates"];
    std::cout << fmt::format("state      {}  (run {}, {})\n", r.value("state", "?"), num(r, "run_index"),
                             r.value("run", ""));
    std::cout << fmt::format("file       {}\n", r.value("file", ""));
    std::cout << fmt::format("backend    {}\n", r.value("backend", ""));
    std::cout << fmt::format("frames     received {}  processed {}  dark {}  data {}\n", num(f, "received"),
                             num(f, "processed"), num(f, "dark"), num(f, "data"));
    std::cout << fmt::format("losses     incomplete {}  missing {}  dropped {}  late parts {}\n",
                             num(f, "incomplete"), num(f, "missing"), num(f, "dropped"), num(r, "late_parts"));
    std::string bad;
    for (auto& [k, v] : r["malformed"].items())
      if (v.get<uint64_t>() > 0) bad += fmt::format(" {} {}", k, v.get<uint64_t>());
    std::cout << fmt::format("bad input  {}{}\n", num(r, "malformed_total"), bad.empty() ? "" : " (" + bad.substr(1) + ")");
    if (r.contains("ingest"))
      std::cout << fmt::format("stream     stride {}  restarts {}  missing rows not written {}  "
                               "outside a run {}  held for the next run {}\n",
                               num(r, "stream_stride"), num(r, "restarts"),
                               num(r, "missing_unwritten"), num(r["ingest"], "frames_outside_run"),
                               num(r["ingest"], "held_parts"));
    std::cout << fmt::format("clusters   {}  masked {} (on {} masked pixels)\n",
                             num(r, "clusters"), num(r, "masked_clusters"),
                             num(r, "masked_pixels"));
    if (r.contains("modules")) {
      std::string line;
      for (const auto& m : r["modules"])
        line += fmt::format("  {}: {}", m.value("id", 0), m.value("clusters", uint64_t{0}));
      std::cout << fmt::format("modules    clusters by module id{}\n", line);
    }
    std::cout << fmt::format("rates      {:.1f} frames/s  {:.3f} GB/s  {:.0f} clusters/s\n",
                             rt.value("frames_per_s", 0.0), rt.value("bytes_per_s", 0.0) / 1e9,
                             rt.value("clusters_per_s", 0.0));
    std::cout << fmt::format("queues     pending {}  queued {}  staging {}/{}\n", num(q, "pending_images"),
                             num(q, "queued_images"), num(q, "staging_used"), num(q, "staging_total"));
    if (r.contains("reconstruction") && r["reconstruction"].value("enabled", false)) {
      const auto& rc = r["reconstruction"];
      std::cout << fmt::format("recon      volumes done {}  dropped {}  failed {}  ({} frames)\n",
                               num(rc, "volumes_done"), num(rc, "volumes_dropped"),
                               num(rc, "volumes_failed"), num(rc, "frames"));
    }
    std::cout << fmt::format("uptime     {:.0f} s\n", r.value("uptime_s", 0.0));
    if (!r.value("error", std::string()).empty()) std::cout << "error      " << r["error"].get<std::string>() << "\n";
    return;
  }
  if (cmd == "status") {
    std::cout << fmt::format("{}", r.value("state", "?"));
    if (r.contains("run_index")) std::cout << fmt::format(": run {} -> {} ({} frames)", num(r, "run_index"),
                                                          r.value("file", ""), num(r, "frames"));
    else if (r.contains("last_run")) {
      const auto& l = r["last_run"];
      const std::string error = l.value("error", std::string());
      const bool written = l.value("file_written", true);
      if (!error.empty() && l.value("run_index", 0) == 0)
        std::cout << "; the last run could not start";
      else if (!error.empty())
        std::cout << fmt::format("; last run {} failed after {} frames{}", num(l, "run_index"),
                                 num(l, "frames"),
                                 written ? " -> " + l.value("file", std::string())
                                         : std::string(" (no file written)"));
      else
        std::cout << fmt::format("; last run {} ended ({}): {} frames, {} clusters -> {}",
                                 num(l, "run_index"), l.value("end_reason", ""), num(l, "frames"),
                                 num(l, "clusters"), l.value("file", ""));
    }
    if (!r.value("error", std::string()).empty()) std::cout << "; error: " << r["error"].get<std::string>();
    std::cout << fmt::format("; up {:.0f} s\n", r.value("uptime_s", 0.0));
    return;
  }
  if (cmd == "pedestal") {
    if (!r.value("available", false)) {
      std::cout << "no pedestal yet\n";
      return;
    }
    std::cout << fmt::format("pedestal of {}: {}x{}, {} frames (window {}), mean {:.2f} ADU, noise {:.3f} ADU\n",
                             r.value("source", ""), num(r, "rows"), num(r, "cols"), num(r, "frames"),
                             num(r, "window"), r.value("mean_adu", 0.0), r.value("noise_adu", 0.0));
    return;
  }
  json copy = r;
  copy.erase("ok");
  std::cout << cmd << ": ok" << (copy.empty() ? "" : " " + copy.dump()) << "\n";
}

/// One daemon of the command: where it is and how to reach it.
struct Target {
  std::string endpoint;
  ClientKeys keys;
};

/// What one daemon answered, or why it did not.
struct Outcome {
  std::string endpoint;
  json reply;         ///< null when there was no answer
  std::string error;  ///< empty when the reply says ok
};

/// Sends `req` to every target at once (one REQ socket each) and waits for all of them.
std::vector<Outcome> request_all(zmq::context_t& ctx, const std::vector<Target>& targets,
                                 const json& req, int timeout_ms) {
  std::vector<std::future<Outcome>> pending;
  for (const auto& t : targets)
    pending.push_back(std::async(std::launch::async, [&ctx, &t, &req, timeout_ms] {
      Outcome o{t.endpoint, nullptr, {}};
      try {
        o.reply = request(ctx, t.endpoint, req, timeout_ms, t.keys);
        if (!o.reply.value("ok", false))
          o.error = log::one_line(o.reply.value("error", std::string("failed")));
      } catch (const std::exception& e) {
        o.error = log::one_line(e.what());
      }
      return o;
    }));
  std::vector<Outcome> out;
  for (auto& f : pending) out.push_back(f.get());
  return out;
}

/// Adds the numbers of `from` into `into`, key by key (nested objects too; other values are
/// left alone).
void add_numbers(json& into, const json& from) {
  for (const auto& [k, v] : from.items()) {
    if (v.is_object()) {
      add_numbers(into[k], v);
    } else if (v.is_number_unsigned() || v.is_number_integer()) {
      into[k] = (into.contains(k) && into[k].is_number() ? into[k].get<uint64_t>() : 0) +
                v.get<uint64_t>();
    } else if (v.is_number_float()) {
      into[k] = (into.contains(k) && into[k].is_number() ? into[k].get<double>() : 0.0) +
                v.get<double>();
    }
  }
}

/// The detector-wide view of several daemons' stats: counts and rates added up, states counted.
json total_stats(const std::vector<Outcome>& outcomes) {
  json t = json::object();
  json states = json::object();
  int answered = 0;
  for (const auto& o : outcomes) {
    if (!o.error.empty()) continue;
    ++answered;
    const json& r = o.reply;
    const std::string state = r.value("state", "?");
    states[state] = states.value(state, 0) + 1;
    json part = json::object();
    for (const char* key : {"frames", "rates", "malformed"})
      if (r.contains(key)) part[key] = r[key];
    for (const char* key : {"clusters", "masked_clusters", "late_parts", "malformed_total",
                            "missing_unwritten"})
      if (r.contains(key)) part[key] = r[key];
    add_numbers(t, part);
  }
  if (t.contains("rates")) t["rates"].erase("window_s");
  t["daemons"] = outcomes.size();
  t["answered"] = answered;
  t["states"] = states;
  return t;
}

void print_total(const json& t) {
  std::string states;
  for (const auto& [k, v] : t["states"].items()) states += fmt::format(" {} {}", k, v.dump());
  std::cout << fmt::format("daemons    {} answered of {}  ({})\n", num(t, "answered"),
                           num(t, "daemons"), states.empty() ? "none" : states.substr(1));
  if (!t.contains("frames")) return;
  const auto& f = t["frames"];
  std::cout << fmt::format("frames     received {}  processed {}  dark {}  data {}\n",
                           num(f, "received"), num(f, "processed"), num(f, "dark"),
                           num(f, "data"));
  std::cout << fmt::format("losses     incomplete {}  missing {}  dropped {}  late parts {}\n",
                           num(f, "incomplete"), num(f, "missing"), num(f, "dropped"),
                           num(t, "late_parts"));
  std::cout << fmt::format("bad input  {}\n", num(t, "malformed_total"));
  std::cout << fmt::format("clusters   {}  masked {}\n", num(t, "clusters"),
                           num(t, "masked_clusters"));
  const json rt = t.value("rates", json::object());
  std::cout << fmt::format("rates      {:.1f} frames/s  {:.3f} GB/s  {:.0f} clusters/s\n",
                           rt.value("frames_per_s", 0.0), rt.value("bytes_per_s", 0.0) / 1e9,
                           rt.value("clusters_per_s", 0.0));
}

/// Several daemons: each one's answer under its endpoint, the total for stats, and every
/// failure on one line of its own naming the endpoint. Returns whether all of them succeeded.
bool report_all(const std::string& cmd, const std::vector<Outcome>& outcomes, bool as_json) {
  std::vector<std::string> failed;
  for (const auto& o : outcomes)
    if (!o.error.empty()) failed.push_back(o.endpoint);
  if (as_json) {
    json j{{"ok", failed.empty()}, {"daemons", json::array()}};
    for (const auto& o : outcomes) {
      json d{{"endpoint", o.endpoint}, {"ok", o.error.empty()}};
      if (!o.reply.is_null()) d["reply"] = o.reply;
      if (!o.error.empty()) d["error"] = o.error;
      j["daemons"].push_back(d);
    }
    if (cmd == "stats") j["total"] = total_stats(outcomes);
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& o : outcomes) {
      if (!o.error.empty()) continue;
      if (cmd == "status") {
        std::cout << o.endpoint << "  ";
        print_human(cmd, o.reply);
      } else {
        std::cout << fmt::format("== glintd at {}\n", o.endpoint);
        print_human(cmd, o.reply);
      }
    }
    if (cmd == "stats") {
      std::cout << fmt::format("== total of {} daemons\n", outcomes.size());
      print_total(total_stats(outcomes));
    }
  }
  for (const auto& o : outcomes)
    if (!o.error.empty()) std::cerr << "glint ctl " << cmd << ": " << o.endpoint << ": " << o.error << "\n";
  if (!failed.empty()) {
    std::string list;
    for (const auto& e : failed) list += (list.empty() ? "" : ", ") + e;
    std::cerr << fmt::format("glint ctl {}: {} of {} daemons failed ({})\n", cmd, failed.size(),
                             outcomes.size(), list);
  }
  return failed.empty();
}

}  // namespace

void add_ctl_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ctl", "control one or several running glintd");
  struct Args {
    std::vector<std::string> endpoints;
    std::vector<std::string> configs;
    std::string command;
    std::string overrides;
    bool as_json = false;
    int timeout_ms = 0;  // 0: 3000, and 15000 for start (which waits for the run to open)
    double interval_s = 1.0;
    int count = 0;
    std::string key_file, server_key, output;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--endpoint", a->endpoints,
                  "glintd's control endpoint; repeat it to address several daemons at once "
                  "[tcp://127.0.0.1:5555]")
      ->allow_extra_args(false);
  cmd->add_option("--config", a->configs,
                  "glintd's configuration file: its control.endpoint (and CURVE server key); "
                  "repeatable, one per daemon; with --endpoint as well, both are addressed")
      ->allow_extra_args(false);
  cmd->add_flag("--json", a->as_json, "print the reply as JSON");
  cmd->add_option("--timeout-ms", a->timeout_ms, "reply timeout [3000; start: 15000]");
  cmd->add_option("--overrides", a->overrides,
                  "start: JSON of config sections to override, e.g. '{\"run\": {\"max_frames\": 100}}'");
  cmd->add_option("--interval", a->interval_s, "watch: seconds between refreshes")->capture_default_str();
  cmd->add_option("--count", a->count, "watch: stop after this many refreshes (0 = until Ctrl-C)");
  cmd->add_option("--key-file", a->key_file,
                  "CURVE: this client's key pair file (from `glint ctl keygen`)");
  cmd->add_option("--server-key", a->server_key,
                  "CURVE: glintd's public key (Z85) or a file holding it (its key pair's .pub)");
  cmd->add_option("--output", a->output, "keygen: the key pair file to write (and FILE.pub)");
  cmd->add_option(
         "command", a->command,
         "status | stats | start | stop | abort | config | pedestal | shutdown | watch | keygen")
      ->required()
      ->check(CLI::IsMember({"status", "stats", "start", "stop", "abort", "config", "pedestal",
                             "shutdown", "watch", "keygen"}));
  cmd->callback([a] {
    try {
      if (a->command == "keygen") {
        if (a->output.empty()) fail("glint ctl keygen", "--output FILE is required", kExitUsage);
        const auto keys = daemon::generate_key_pair();
        daemon::write_key_pair(a->output, keys);
        std::cout << fmt::format("wrote {} (key pair, keep it secret) and {}.pub\npublic: {}\n",
                                 a->output, a->output, keys.public_key);
        return;
      }
      if (a->key_file.empty() != a->server_key.empty() && a->configs.empty())
        fail("glint ctl", "CURVE needs both --key-file and --server-key", kExitUsage);
      daemon::CurveKeyPair own;
      if (!a->key_file.empty()) own = daemon::read_key_pair(a->key_file, true);
      std::vector<Target> targets;
      for (const auto& e : a->endpoints) {
        Target t{e, {}};
        if (!a->server_key.empty()) t.keys = {own, daemon::public_key_from(a->server_key)};
        targets.push_back(std::move(t));
      }
      for (const auto& file : a->configs) {
        config::Config c;
        try {
          c = config::load(file);
        } catch (const config::ConfigError& e) {
          fail("glint ctl", log::one_line(e.what()), kExitUsage);
        }
        Target t{connect_endpoint(c.control.endpoint), {}};
        std::string server_key = a->server_key;
        if (c.control.curve() && server_key.empty()) {
          // The pair file is glintd's secret (mode 0600); its .pub beside it is for clients.
          const std::string pub = c.control.curve_server_key + ".pub";
          std::error_code ec;
          server_key = std::filesystem::exists(pub, ec) ? pub : c.control.curve_server_key;
        }
        if (!server_key.empty()) {
          if (a->key_file.empty())
            fail("glint ctl",
                 fmt::format("{}: glintd's control socket uses CURVE; give this client's key pair "
                             "with --key-file FILE (from `glint ctl keygen`, its public key in "
                             "glintd's control.curve_clients)",
                             file),
                 kExitUsage);
          t.keys = {own, daemon::public_key_from(server_key)};
        }
        targets.push_back(std::move(t));
      }
      if (targets.empty()) {
        Target t{"tcp://127.0.0.1:5555", {}};
        if (!a->server_key.empty()) t.keys = {own, daemon::public_key_from(a->server_key)};
        targets.push_back(std::move(t));
      }
      if (a->timeout_ms <= 0) a->timeout_ms = a->command == "start" ? 15000 : 3000;
      zmq::context_t ctx(1);  // one for the command, `watch` included
      if (a->command == "watch") {
        const std::atomic<bool>& stop = stop_on_signals();
        for (int i = 0; !stop.load() && (a->count == 0 || i < a->count); ++i) {
          if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(a->interval_s));
          if (targets.size() == 1) {
            const json r =
                request(ctx, targets[0].endpoint, json{{"command", "stats"}}, a->timeout_ms,
                        targets[0].keys);
            if (a->as_json) {
              std::cout << r.dump() << std::endl;
            } else {
              std::cout << "\x1b[H\x1b[2J" << fmt::format("glintd at {}\n", targets[0].endpoint);
              print_human("stats", r);
              std::cout.flush();
            }
            continue;
          }
          const auto outcomes =
              request_all(ctx, targets, json{{"command", "stats"}}, a->timeout_ms);
          if (!a->as_json) std::cout << "\x1b[H\x1b[2J";
          report_all("stats", outcomes, a->as_json);
          std::cout.flush();
        }
        return;
      }
      json req{{"command", a->command}};
      if (!a->overrides.empty()) {
        json o = json::parse(a->overrides, nullptr, false);
        if (o.is_discarded() || !o.is_object())
          fail("glint ctl", "--overrides is not a JSON object", kExitUsage);
        req["overrides"] = o;
      }
      if (targets.size() > 1) {
        if (!report_all(a->command, request_all(ctx, targets, req, a->timeout_ms), a->as_json))
          throw CLI::RuntimeError(kExitFailure);
        return;
      }
      const json r = request(ctx, targets[0].endpoint, req, a->timeout_ms, targets[0].keys);
      if (a->as_json) std::cout << r.dump(2) << "\n";
      if (!r.value("ok", false)) {
        if (!a->as_json)
          std::cerr << "glint ctl " << a->command << ": "
                    << log::one_line(r.value("error", std::string("failed"))) << "\n";
        throw CLI::RuntimeError(kExitFailure);
      }
      if (!a->as_json) print_human(a->command, r);
    } catch (const CLI::RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      std::cerr << "glint ctl: " << log::one_line(e.what()) << "\n";
      throw CLI::RuntimeError(kExitFailure);
    }
  });
}

}  // namespace glint::tools
