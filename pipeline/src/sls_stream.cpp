#include "glint/pipeline/sls_stream.hpp"

#include <algorithm>
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

ParsedHeader parse_sls_header(std::string_view text) {
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
