#include "glint/pipeline/sls_stream.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

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
    case BadInput::oversize: return "oversize";
    case BadInput::out_of_range: return "out_of_range";
    case BadInput::frame_jump: return "frame_jump";
    case BadInput::count_: break;
  }
  return "unknown";
}

namespace {

namespace dom = simdjson::dom;

/// The header keys glint reads. A key given twice counts with its last value.
enum class Key : uint8_t {
  jsonversion, bitmode, fileIndex, detshape, shape, size, acqIndex, frameIndex, progress, fname,
  data, completeImage, frameNumber, expLength, packetNumber, detSpec1, timestamp, modId, row,
  column, detSpec2, detSpec3, detSpec4, detType, version, flipRows, quad, addJsonHeader, rx_roi,
  count_
};

constexpr std::array<std::string_view, static_cast<std::size_t>(Key::count_)> kKeyNames = {
    "jsonversion", "bitmode", "fileIndex", "detshape", "shape", "size", "acqIndex", "frameIndex",
    "progress", "fname", "data", "completeImage", "frameNumber", "expLength", "packetNumber",
    "detSpec1", "timestamp", "modId", "row", "column", "detSpec2", "detSpec3", "detSpec4",
    "detType", "version", "flipRows", "quad", "addJsonHeader", "rx_roi"};

/// The key called `name`, searched from `hint` on (cyclically): slsReceiver sends the keys in
/// kKeyNames' order, so that with the previous key's successor as the hint a key is found at the
/// first comparison instead of after up to 29 (a header is parsed per message).
std::optional<Key> key_of(std::string_view name, std::size_t hint) {
  constexpr std::size_t n = kKeyNames.size();
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = (hint + j) % n;
    if (kKeyNames[i] == name) return static_cast<Key>(i);
  }
  return std::nullopt;
}

struct Missing {
  std::string key;
};

/// A number that does not fit the key's field (a 32-bit field, or `data` that is not 0 or 1).
struct OutOfRange {
  std::string detail;
};

/// "4294967296", or a float as given ("0.5").
std::string number_text(dom::element v) {
  switch (v.type()) {
    case dom::element_type::UINT64: return std::to_string(uint64_t(v));
    case dom::element_type::INT64: return std::to_string(int64_t(v));
    default: return simdjson::minify(v);
  }
}

/// The values of the known keys of one header object.
class Fields {
 public:
  explicit Fields(dom::object obj) {
    std::size_t hint = 0;
    for (auto [name, value] : obj)
      if (const auto k = key_of(name, hint)) {
        value_[static_cast<std::size_t>(*k)] = value;
        hint = static_cast<std::size_t>(*k) + 1;
      }
  }
  const std::optional<dom::element>& operator[](Key k) const {
    return value_[static_cast<std::size_t>(k)];
  }

  /// A non-negative number below 2^64 (an integer, or a float truncated) as T; absent: `fallback`, or
  /// Missing when required.
  template <class T>
  T uint(Key k, bool required, T fallback = 0) const {
    const auto& v = (*this)[k];
    if (!v) {
      if (required) throw Missing{std::string(kKeyNames[static_cast<std::size_t>(k)])};
      return fallback;
    }
    uint64_t u = 0;
    switch (v->type()) {
      case dom::element_type::UINT64: u = uint64_t(*v); break;
      case dom::element_type::INT64:
        if (int64_t(*v) < 0) throw not_a_count(k);
        u = static_cast<uint64_t>(int64_t(*v));
        break;
      case dom::element_type::DOUBLE:
        // Truncated; a value beyond 64 bits is no count or index.
        if (!(double(*v) >= 0 && double(*v) < 0x1p64)) throw not_a_count(k);
        u = static_cast<uint64_t>(double(*v));
        break;
      default: throw not_a_count(k);
    }
    // Checked at the field's real width: a 32-bit field is never truncated.
    if (u > std::numeric_limits<T>::max())
      throw OutOfRange{fmt::format("{} = {} (allowed: 0 to {})",
                                   kKeyNames[static_cast<std::size_t>(k)], number_text(*v),
                                   std::numeric_limits<T>::max())};
    return static_cast<T>(u);
  }

  /// `data`: exactly the integer 0 (end of acquisition) or 1 (data); required.
  uint32_t data_flag() const {
    const auto& v = (*this)[Key::data];
    if (!v) throw Missing{"data"};
    if (v->type() == dom::element_type::UINT64 && uint64_t(*v) <= 1)
      return static_cast<uint32_t>(uint64_t(*v));
    if (v->type() == dom::element_type::INT64 && (int64_t(*v) == 0 || int64_t(*v) == 1))
      return static_cast<uint32_t>(int64_t(*v));
    if (!v->is_number()) throw not_a_count(Key::data);
    throw OutOfRange{fmt::format("data = {} (allowed: the integer 0 or 1)", number_text(*v))};
  }

  /// [x, y] of unsigned integers (required).
  std::array<uint32_t, 2> pair(Key k) const {
    const auto& v = (*this)[k];
    const std::string name(kKeyNames[static_cast<std::size_t>(k)]);
    if (!v) throw Missing{name};
    dom::array a;
    std::array<uint32_t, 2> out{};
    if (v->get_array().get(a) || a.size() != 2) throw Missing{name + " (not [x, y])"};
    std::size_t i = 0;
    for (dom::element e : a) {
      uint64_t u = 0;
      if (!is_unsigned(e) || e.get_uint64().get(u)) throw Missing{name + " (not [x, y])"};
      if (u > std::numeric_limits<uint32_t>::max())
        throw OutOfRange{fmt::format("{}[{}] = {} (allowed: 0 to {})", name, i, u,
                                     std::numeric_limits<uint32_t>::max())};
      out[i++] = static_cast<uint32_t>(u);
    }
    return out;
  }

 private:
  static Missing not_a_count(Key k) {
    return Missing{std::string(kKeyNames[static_cast<std::size_t>(k)]) +
                   " (not a non-negative number)"};
  }

  static bool is_unsigned(dom::element e) {
    return e.type() == dom::element_type::UINT64 ||
           (e.type() == dom::element_type::INT64 && int64_t(e) >= 0);
  }

  std::array<std::optional<dom::element>, static_cast<std::size_t>(Key::count_)> value_;
};

}  // namespace

ParsedHeader parse_sls_header(std::string_view text) {
  ParsedHeader r;
  if (text.size() > kMaxSlsHeaderBytes) {
    r.reason = BadInput::oversize;
    r.detail =
        fmt::format("a {}-byte header (allowed: up to {} bytes)", text.size(), kMaxSlsHeaderBytes);
    return r;
  }
  // One parser per thread: its buffers are reused, so a header costs no allocation; its capacity
  // stays within kMaxSlsHeaderBytes.
  thread_local dom::parser parser(kMaxSlsHeaderBytes);
  // Senders that write a C string may include its terminating NUL.
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  dom::element doc;
  if (parser.parse(text.data(), text.size()).get(doc)) {
    r.reason = BadInput::malformed_json;
    r.detail = "not valid JSON";
    return r;
  }
  dom::object obj;
  if (doc.get_object().get(obj)) {
    r.reason = BadInput::malformed_json;
    r.detail = "not a JSON object";
    return r;
  }
  try {
    const Fields j(obj);
    SlsHeader h;
    h.data = j.data_flag();
    h.jsonversion = j.uint<uint32_t>(Key::jsonversion, false, 0);
    if (h.is_end()) {
      r.header = h;
      return r;
    }
    h.bitmode = j.uint<uint32_t>(Key::bitmode, true);
    h.file_index = j.uint<uint64_t>(Key::fileIndex, false);
    h.detshape = j.pair(Key::detshape);
    h.shape = j.pair(Key::shape);
    h.size = j.uint<uint64_t>(Key::size, true);
    h.acq_index = j.uint<uint64_t>(Key::acqIndex, false);
    h.frame_index = j.uint<uint64_t>(Key::frameIndex, false);
    if (const auto& v = j[Key::progress]; v && v->is_number()) h.progress = double(*v);
    if (const auto& v = j[Key::fname]; v && v->is_string()) h.fname = std::string_view(*v);
    h.complete_image = j.uint<uint32_t>(Key::completeImage, false, 1);
    h.frame_number = j.uint<uint64_t>(Key::frameNumber, true);
    h.exp_length = j.uint<uint64_t>(Key::expLength, false);
    h.packet_number = j.uint<uint64_t>(Key::packetNumber, false);
    h.det_spec1 = j.uint<uint64_t>(Key::detSpec1, false);
    h.timestamp = j.uint<uint64_t>(Key::timestamp, false);
    h.mod_id = j.uint<uint32_t>(Key::modId, false);
    h.row = j.uint<uint32_t>(Key::row, true);
    h.column = j.uint<uint32_t>(Key::column, true);
    h.det_spec2 = j.uint<uint32_t>(Key::detSpec2, false);
    h.det_spec3 = j.uint<uint32_t>(Key::detSpec3, false);
    h.det_spec4 = j.uint<uint32_t>(Key::detSpec4, false);
    h.det_type = j.uint<uint32_t>(Key::detType, false);
    h.version = j.uint<uint32_t>(Key::version, false);
    h.flip_rows = j.uint<uint32_t>(Key::flipRows, false);
    h.quad = j.uint<uint32_t>(Key::quad, false);
    if (const auto& v = j[Key::addJsonHeader]; v && v->is_object()) {
      // Values as given: strings as they are, anything else as its JSON text.
      for (auto [k, e] : dom::object(*v))
        h.add_json_header[std::string(k)] =
            e.is_string() ? std::string(std::string_view(e)) : simdjson::minify(e);
    }
    if (const auto& v = j[Key::rx_roi]; v && v->is_array() && dom::array(*v).size() == 4) {
      int i = 0;
      for (dom::element e : dom::array(*v)) {
        int64_t x = 0;
        if (e.type() == dom::element_type::INT64 && !e.get_int64().get(x))
          h.rx_roi[i] = static_cast<int>(x);
        ++i;
      }
    }
    r.header = std::move(h);
  } catch (const Missing& m) {
    r.reason = BadInput::missing_field;
    r.detail = "missing or invalid key " + m.key;
  } catch (const OutOfRange& o) {
    r.reason = BadInput::out_of_range;
    r.detail = o.detail;
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

bool SlsHeader::marked_dark() const {
  const auto it = add_json_header.find("frameMode");
  return it != add_json_header.end() && (it->second == "pedestal" || it->second == "newPedestal");
}

bool is_valid_bitmode(uint32_t b) { return b == 4 || b == 8 || b == 12 || b == 16 || b == 32; }

std::size_t payload_bytes(uint32_t bitmode, std::size_t pixels) {
  if (bitmode == 4) return (pixels + 1) / 2;
  if (bitmode == 12) return (pixels * 3 + 1) / 2;
  return pixels * (bitmode / 8);
}

void copy_streaming(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // Up to the first 16-byte boundary of dst, then 64 bytes per step, then the tail.
  const std::size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, bytes);
  _mm_sfence();  // the streamed stores are ordered before what this thread does next
#else
  std::memcpy(dst, src, bytes);
#endif
}

void decode_row(uint32_t bitmode, const std::byte* src, std::size_t first_pixel, std::size_t n,
                uint16_t* dst, bool streaming) {
  switch (bitmode) {
    case 16:  // x86/ARM little-endian hosts
      if (streaming) copy_streaming(dst, src + first_pixel * 2, n * 2);
      else std::memcpy(dst, src + first_pixel * 2, n * 2);
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
    case 12: {
      const auto* s = reinterpret_cast<const uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t p = first_pixel + i;
        const uint8_t* b = s + (p / 2) * 3;
        dst[i] = (p % 2 == 0) ? static_cast<uint16_t>(b[0] | (b[1] & 0x0F) << 8)
                              : static_cast<uint16_t>(b[1] >> 4 | b[2] << 4);
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
    case 12:
      std::memset(dst, 0, payload_bytes(12, px.size()));
      for (std::size_t i = 0; i < px.size(); ++i) {
        const uint16_t v = std::min<uint16_t>(px[i], 4095);
        auto* b = reinterpret_cast<uint8_t*>(dst) + (i / 2) * 3;
        if (i % 2 == 0) {
          b[0] = static_cast<uint8_t>(v & 0xFF);
          b[1] = static_cast<uint8_t>(b[1] | v >> 8);
        } else {
          b[1] = static_cast<uint8_t>(b[1] | (v & 0x0F) << 4);
          b[2] = static_cast<uint8_t>(v >> 4);
        }
      }
      return;
    default: return;
  }
}

}  // namespace glint::pipeline
