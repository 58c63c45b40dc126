#include "glint/pipeline/sls_stream.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace glint::pipeline {

std::string_view to_string(BadInput kind) {
  switch (kind) {
    case BadInput::malformed_json: return "malformed_json";
    case BadInput::missing_field: return "missing_field";
    case BadInput::size_mismatch: return "size_mismatch";
    case BadInput::wrong_shape: return "wrong_shape";
    case BadInput::unknown_bitmode: return "unknown_bitmode";
    case BadInput::data_without_header: return "data_without_header";
    case BadInput::frame_backwards: return "frame_backwards";
    case BadInput::unknown_port: return "unknown_port";
    case BadInput::count_: break;
  }
  return "unknown";
}

namespace {

using nlohmann::json;

struct Missing {
  std::string key;
};

template <class T>
T get_uint(const json& j, const char* key, bool required, T fallback = 0) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) throw Missing{key};
    return fallback;
  }
  if (it->is_number_unsigned()) return static_cast<T>(it->get<uint64_t>());
  if (it->is_number_integer() && it->get<int64_t>() >= 0) return static_cast<T>(it->get<int64_t>());
  if (it->is_number_float() && it->get<double>() >= 0) return static_cast<T>(it->get<double>());
  throw Missing{std::string(key) + " (not a non-negative number)"};
}

std::array<uint32_t, 2> get_pair(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw Missing{key};
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned())
    throw Missing{std::string(key) + " (not [x, y])"};
  return {(*it)[0].get<uint32_t>(), (*it)[1].get<uint32_t>()};
}

}  // namespace

namespace {

/// A single-pass reader of the common header form; every method returns false (give up) on
/// anything it does not handle, and the caller then uses the general parser.
class CommonHeaderReader {
 public:
  explicit CommonHeaderReader(std::string_view t) : p_(t.data()), end_(t.data() + t.size()) {}

  std::optional<SlsHeader> read() {
    SlsHeader h;
    skip_ws();
    if (!eat('{')) return std::nullopt;
    skip_ws();
    if (!eat('}')) {
      while (true) {
        std::string_view key;
        skip_ws();
        if (!string(key)) return std::nullopt;
        skip_ws();
        if (!eat(':')) return std::nullopt;
        skip_ws();
        if (!member(key, h)) return std::nullopt;
        skip_ws();
        if (eat(',')) continue;
        if (eat('}')) break;
        return std::nullopt;
      }
    }
    skip_ws();
    if (p_ != end_) return std::nullopt;
    // Required keys, as the general parser wants them (an end message needs only "data").
    if (!(seen_ & bit(Key::data))) return std::nullopt;
    if (h.is_end()) {
      SlsHeader e;
      e.data = h.data;
      e.jsonversion = (seen_ & bit(Key::jsonversion)) ? h.jsonversion : 0;
      return e;
    }
    const uint32_t required = bit(Key::bitmode) | bit(Key::detshape) | bit(Key::shape) |
                                  bit(Key::size) | bit(Key::frameNumber) | bit(Key::row) |
                                  bit(Key::column);
    if ((seen_ & required) != required) return std::nullopt;
    if (!(seen_ & bit(Key::jsonversion))) h.jsonversion = 0;
    return h;
  }

 private:
  enum class Key : uint32_t {
    jsonversion, bitmode, fileIndex, detshape, shape, size, acqIndex, frameIndex, progress, fname,
    data, completeImage, frameNumber, expLength, packetNumber, detSpec1, timestamp, modId, row,
    column, detSpec2, detSpec3, detSpec4, detType, version, flipRows, quad, addJsonHeader, rx_roi,
    other
  };
  static constexpr uint32_t bit(Key k) { return uint32_t{1} << static_cast<uint32_t>(k); }

  static Key key_of(std::string_view k) {
    static constexpr std::pair<std::string_view, Key> keys[] = {
        {"jsonversion", Key::jsonversion}, {"bitmode", Key::bitmode}, {"fileIndex", Key::fileIndex},
        {"detshape", Key::detshape}, {"shape", Key::shape}, {"size", Key::size},
        {"acqIndex", Key::acqIndex}, {"frameIndex", Key::frameIndex}, {"progress", Key::progress},
        {"fname", Key::fname}, {"data", Key::data}, {"completeImage", Key::completeImage},
        {"frameNumber", Key::frameNumber}, {"expLength", Key::expLength},
        {"packetNumber", Key::packetNumber}, {"detSpec1", Key::detSpec1},
        {"timestamp", Key::timestamp}, {"modId", Key::modId}, {"row", Key::row},
        {"column", Key::column}, {"detSpec2", Key::detSpec2}, {"detSpec3", Key::detSpec3},
        {"detSpec4", Key::detSpec4}, {"detType", Key::detType}, {"version", Key::version},
        {"flipRows", Key::flipRows}, {"quad", Key::quad}, {"addJsonHeader", Key::addJsonHeader},
        {"rx_roi", Key::rx_roi}};
    for (const auto& [name, key] : keys)
      if (name == k) return key;
    return Key::other;
  }

  bool member(std::string_view name, SlsHeader& h) {
    const Key k = key_of(name);
    if (k != Key::other) {
      if (seen_ & bit(k)) return false;  // a repeated key: the general parser keeps the last
      seen_ |= bit(k);
    }
    switch (k) {
      case Key::jsonversion: return uint(h.jsonversion);
      case Key::bitmode: return uint(h.bitmode);
      case Key::fileIndex: return uint(h.file_index);
      case Key::detshape: return pair(h.detshape);
      case Key::shape: return pair(h.shape);
      case Key::size: return uint(h.size);
      case Key::acqIndex: return uint(h.acq_index);
      case Key::frameIndex: return uint(h.frame_index);
      case Key::progress: return number(h.progress);
      case Key::fname: {
        std::string_view v;
        if (!string(v)) return false;
        h.fname.assign(v);
        return true;
      }
      case Key::data: return uint(h.data);
      case Key::completeImage: return uint(h.complete_image);
      case Key::frameNumber: return uint(h.frame_number);
      case Key::expLength: return uint(h.exp_length);
      case Key::packetNumber: return uint(h.packet_number);
      case Key::detSpec1: return uint(h.det_spec1);
      case Key::timestamp: return uint(h.timestamp);
      case Key::modId: return uint(h.mod_id);
      case Key::row: return uint(h.row);
      case Key::column: return uint(h.column);
      case Key::detSpec2: return uint(h.det_spec2);
      case Key::detSpec3: return uint(h.det_spec3);
      case Key::detSpec4: return uint(h.det_spec4);
      case Key::detType: return uint(h.det_type);
      case Key::version: return uint(h.version);
      case Key::flipRows: return uint(h.flip_rows);
      case Key::quad: return uint(h.quad);
      case Key::addJsonHeader: return string_object(h.add_json_header);
      case Key::rx_roi: return roi(h.rx_roi);
      case Key::other: return skip_scalar();
    }
    return false;
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }
  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  /// A string without escapes, control characters or non-ASCII bytes (the general parser
  /// validates UTF-8 and decodes escapes).
  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    const char* b = p_;
    while (p_ != end_ && *p_ != '"') {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
      ++p_;
    }
    if (p_ == end_) return false;
    out = std::string_view(b, static_cast<std::size_t>(p_ - b));
    ++p_;
    return true;
  }
  /// A JSON number's text: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number_text(std::string_view& out, bool& integer) {
    const char* b = p_;
    eat('-');
    if (p_ == end_ || !digit(*p_)) return false;
    if (*p_ == '0') ++p_;
    else
      while (p_ != end_ && digit(*p_)) ++p_;
    integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (p_ == end_ || !digit(*p_)) return false;
      while (p_ != end_ && digit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !digit(*p_)) return false;
      while (p_ != end_ && digit(*p_)) ++p_;
    }
    out = std::string_view(b, static_cast<std::size_t>(p_ - b));
    return true;
  }
  /// A non-negative integer that fits 64 bits (what the general parser reads as unsigned).
  bool u64(uint64_t& v) {
    std::string_view t;
    bool integer = false;
    if (!number_text(t, integer) || !integer || t[0] == '-') return false;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && end == t.data() + t.size();
  }
  template <class T>
  bool uint(T& out) {
    uint64_t v = 0;
    if (!u64(v)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool number(double& out) {
    std::string_view t;
    bool integer = false;
    if (!number_text(t, integer)) return false;
    if (integer) {  // as the general parser: an integer, converted
      if (t[0] == '-') {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || end != t.data() + t.size()) return false;
        out = static_cast<double>(v);
      } else {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || end != t.data() + t.size()) return false;
        out = static_cast<double>(v);
      }
      return true;
    }
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && end == t.data() + t.size() && std::isfinite(out);
  }
  bool pair(std::array<uint32_t, 2>& out) {
    uint64_t a = 0, b = 0;
    if (!eat('[')) return false;
    skip_ws();
    if (!u64(a)) return false;
    skip_ws();
    if (!eat(',')) return false;
    skip_ws();
    if (!u64(b)) return false;
    skip_ws();
    if (!eat(']')) return false;
    out = {static_cast<uint32_t>(a), static_cast<uint32_t>(b)};
    return true;
  }
  bool roi(std::array<int, 4>& out) {
    if (!eat('[')) return false;
    for (int i = 0; i < 4; ++i) {
      skip_ws();
      std::string_view t;
      bool integer = false;
      if (!number_text(t, integer) || !integer) return false;
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size()) return false;
      out[i] = static_cast<int>(v);
      skip_ws();
      if (!eat(i < 3 ? ',' : ']')) return false;
    }
    return true;
  }
  bool string_object(std::map<std::string, std::string>& out) {
    if (!eat('{')) return false;
    skip_ws();
    if (eat('}')) return true;
    while (true) {
      std::string_view k, v;
      skip_ws();
      if (!string(k)) return false;
      skip_ws();
      if (!eat(':')) return false;
      skip_ws();
      if (!string(v)) return false;
      if (!out.emplace(std::string(k), std::string(v)).second) return false;  // repeated key
      skip_ws();
      if (eat(',')) continue;
      return eat('}');
    }
  }
  /// The value of a key glint does not use: a string, a number, true, false or null.
  bool skip_scalar() {
    if (p_ == end_) return false;
    if (*p_ == '"') {
      std::string_view v;
      return string(v);
    }
    for (std::string_view word : {"true", "false", "null"})
      if (static_cast<std::size_t>(end_ - p_) >= word.size() && std::string_view(p_, word.size()) == word) {
        p_ += word.size();
        return true;
      }
    std::string_view t;
    bool integer = false;
    return number_text(t, integer);
  }

  const char* p_;
  const char* end_;
  uint32_t seen_ = 0;
};

}  // namespace

std::optional<SlsHeader> parse_sls_header_common(std::string_view text) {
  return CommonHeaderReader(text).read();
}

ParsedHeader parse_sls_header(std::string_view text) {
  if (auto h = parse_sls_header_common(text)) {
    ParsedHeader r;
    r.header = std::move(h);
    return r;
  }
  return parse_sls_header_general(text);
}

ParsedHeader parse_sls_header_general(std::string_view text) {
  ParsedHeader r;
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    r.reason = BadInput::malformed_json;
    r.detail = j.is_discarded() ? "not valid JSON" : "not a JSON object";
    return r;
  }
  try {
    SlsHeader h;
    h.data = get_uint<uint32_t>(j, "data", true);
    h.jsonversion = get_uint<uint32_t>(j, "jsonversion", false, 0);
    if (h.is_end()) {
      r.header = h;
      return r;
    }
    h.bitmode = get_uint<uint32_t>(j, "bitmode", true);
    h.file_index = get_uint<uint64_t>(j, "fileIndex", false);
    h.detshape = get_pair(j, "detshape");
    h.shape = get_pair(j, "shape");
    h.size = get_uint<uint64_t>(j, "size", true);
    h.acq_index = get_uint<uint64_t>(j, "acqIndex", false);
    h.frame_index = get_uint<uint64_t>(j, "frameIndex", false);
    if (auto it = j.find("progress"); it != j.end() && it->is_number()) h.progress = it->get<double>();
    if (auto it = j.find("fname"); it != j.end() && it->is_string()) h.fname = it->get<std::string>();
    h.complete_image = get_uint<uint32_t>(j, "completeImage", false, 1);
    h.frame_number = get_uint<uint64_t>(j, "frameNumber", true);
    h.exp_length = get_uint<uint64_t>(j, "expLength", false);
    h.packet_number = get_uint<uint64_t>(j, "packetNumber", false);
    h.det_spec1 = get_uint<uint64_t>(j, "detSpec1", false);
    h.timestamp = get_uint<uint64_t>(j, "timestamp", false);
    h.mod_id = get_uint<uint32_t>(j, "modId", false);
    h.row = get_uint<uint32_t>(j, "row", true);
    h.column = get_uint<uint32_t>(j, "column", true);
    h.det_spec2 = get_uint<uint32_t>(j, "detSpec2", false);
    h.det_spec3 = get_uint<uint32_t>(j, "detSpec3", false);
    h.det_spec4 = get_uint<uint32_t>(j, "detSpec4", false);
    h.det_type = get_uint<uint32_t>(j, "detType", false);
    h.version = get_uint<uint32_t>(j, "version", false);
    h.flip_rows = get_uint<uint32_t>(j, "flipRows", false);
    h.quad = get_uint<uint32_t>(j, "quad", false);
    if (auto it = j.find("addJsonHeader"); it != j.end() && it->is_object()) {
      for (auto& [k, v] : it->items())
        h.add_json_header[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    if (auto it = j.find("rx_roi"); it != j.end() && it->is_array() && it->size() == 4) {
      for (int i = 0; i < 4; ++i)
        if ((*it)[i].is_number_integer()) h.rx_roi[i] = (*it)[i].get<int>();
    }
    r.header = std::move(h);
  } catch (const Missing& m) {
    r.reason = BadInput::missing_field;
    r.detail = "missing or invalid key " + m.key;
  } catch (const json::exception& e) {
    r.reason = BadInput::missing_field;
    r.detail = e.what();
  }
  return r;
}

std::string format_sls_header(const SlsHeader& h) {
  // Written by hand in slsReceiver's key order (nlohmann sorts keys).
  std::string s = fmt::format(
      "{{\"jsonversion\":{},\"bitmode\":{},\"fileIndex\":{},\"detshape\":[{},{}],\"shape\":[{},{}],"
      "\"size\":{},\"acqIndex\":{},\"frameIndex\":{},\"progress\":{:.2f},\"fname\":{},\"data\":{},"
      "\"completeImage\":{},\"frameNumber\":{},\"expLength\":{},\"packetNumber\":{},\"detSpec1\":{},"
      "\"timestamp\":{},\"modId\":{},\"row\":{},\"column\":{},\"detSpec2\":{},\"detSpec3\":{},"
      "\"detSpec4\":{},\"detType\":{},\"version\":{},\"flipRows\":{},\"quad\":{}",
      h.jsonversion, h.bitmode, h.file_index, h.detshape[0], h.detshape[1], h.shape[0], h.shape[1],
      h.size, h.acq_index, h.frame_index, h.progress, nlohmann::json(h.fname).dump(), h.data,
      h.complete_image, h.frame_number, h.exp_length, h.packet_number, h.det_spec1, h.timestamp,
      h.mod_id, h.row, h.column, h.det_spec2, h.det_spec3, h.det_spec4, h.det_type, h.version,
      h.flip_rows, h.quad);
  if (!h.add_json_header.empty()) s += ",\"addJsonHeader\":" + nlohmann::json(h.add_json_header).dump();
  if (h.jsonversion >= 5)
    s += fmt::format(",\"rx_roi\":[{},{},{},{}]", h.rx_roi[0], h.rx_roi[1], h.rx_roi[2], h.rx_roi[3]);
  s += "}\n";
  return s;
}

std::string format_sls_end(uint32_t jsonversion) {
  SlsHeader h;
  h.jsonversion = jsonversion;
  h.data = 0;
  h.bitmode = 0;
  h.detshape = {0, 0};
  h.shape = {0, 0};
  h.complete_image = 0;
  return format_sls_header(h);
}

bool is_valid_bitmode(uint32_t b) { return b == 4 || b == 8 || b == 16 || b == 32; }

std::size_t payload_bytes(uint32_t bitmode, std::size_t pixels) {
  return bitmode == 4 ? (pixels + 1) / 2 : pixels * (bitmode / 8);
}

void decode_row(uint32_t bitmode, const std::byte* src, std::size_t first_pixel, std::size_t n,
                uint16_t* dst) {
  switch (bitmode) {
    case 16:
      std::memcpy(dst, src + first_pixel * 2, n * 2);  // x86/ARM little-endian hosts
      return;
    case 8: {
      const auto* s = reinterpret_cast<const uint8_t*>(src) + first_pixel;
      for (std::size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case 32: {
      const std::byte* s = src + first_pixel * 4;
      for (std::size_t i = 0; i < n; ++i) {
        uint32_t v;
        std::memcpy(&v, s + 4 * i, 4);
        dst[i] = static_cast<uint16_t>(std::min<uint32_t>(v, 65535u));
      }
      return;
    }
    case 4: {
      const auto* s = reinterpret_cast<const uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = first_pixel + i;
        const uint8_t byte = s[p / 2];
        dst[i] = (p % 2 == 0) ? (byte >> 4) : (byte & 0x0F);
      }
      return;
    }
    default: return;
  }
}

void encode_pixels(uint32_t bitmode, std::span<const uint16_t> px, std::byte* dst) {
  switch (bitmode) {
    case 16: std::memcpy(dst, px.data(), px.size() * 2); return;
    case 8:
      for (std::size_t i = 0; i < px.size(); ++i)
        dst[i] = static_cast<std::byte>(std::min<uint16_t>(px[i], 255));
      return;
    case 32:
      for (std::size_t i = 0; i < px.size(); ++i) {
        const uint32_t v = px[i];
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return;
    case 4:
      std::memset(dst, 0, payload_bytes(4, px.size()));
      for (std::size_t i = 0; i < px.size(); ++i) {
        const uint8_t v = static_cast<uint8_t>(std::min<uint16_t>(px[i], 15));
        auto& b = reinterpret_cast<uint8_t&>(dst[i / 2]);
        b |= (i % 2 == 0) ? static_cast<uint8_t>(v << 4) : v;
      }
      return;
    default: return;
  }
}

}  // namespace glint::pipeline
