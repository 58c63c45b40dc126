#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <chrono>
#include <ctime>
#include <thread>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/sls_stream.hpp"
#include "stream_test_util.hpp"

using namespace glint::pipeline;

namespace {

SlsHeader sample() {
  SlsHeader h;
  h.bitmode = 16;
  h.detshape = {1, 2};
  h.shape = {400, 200};
  h.size = 400 * 200 * 2;
  h.frame_number = 123456789012ull;
  h.frame_index = 17;
  h.timestamp = 98765;
  h.row = 1;
  h.column = 0;
  h.complete_image = 1;
  h.fname = "/data/run \"x\"";
  h.add_json_header["frameMode"] = "pedestal";
  h.rx_roi = {0, 399, 0, 199};
  return h;
}

}  // namespace

TEST(SlsStream, HeaderRoundTripsV5InSlsReceiverKeyOrder) {
  const SlsHeader h = sample();
  const std::string text = format_sls_header(h);
  EXPECT_EQ(text.substr(text.size() - 2), "}\n");
  EXPECT_EQ(text.rfind("{\"jsonversion\":5,\"bitmode\":16,\"fileIndex\":0,\"detshape\":[1,2],\"shape\":[400,200],", 0), 0u)
      << text;
  EXPECT_LT(text.find("\"frameNumber\""), text.find("\"timestamp\""));
  EXPECT_LT(text.find("\"quad\""), text.find("\"addJsonHeader\""));
  EXPECT_LT(text.find("\"addJsonHeader\""), text.find("\"rx_roi\""));
  const auto p = parse_sls_header(text);
  ASSERT_TRUE(p.header) << p.detail;
  const SlsHeader& g = *p.header;
  EXPECT_EQ(g.jsonversion, 5u);
  EXPECT_EQ(g.bitmode, 16u);
  EXPECT_EQ(g.detshape, h.detshape);
  EXPECT_EQ(g.shape, h.shape);
  EXPECT_EQ(g.size, h.size);
  EXPECT_EQ(g.frame_number, h.frame_number);
  EXPECT_EQ(g.frame_index, 17u);
  EXPECT_EQ(g.timestamp, 98765u);
  EXPECT_EQ(g.row, 1u);
  EXPECT_EQ(g.column, 0u);
  EXPECT_EQ(g.fname, h.fname);
  EXPECT_EQ(g.add_json_header.at("frameMode"), "pedestal");
  EXPECT_EQ(g.rx_roi, h.rx_roi);
  EXPECT_FALSE(g.is_end());
}

TEST(SlsStream, AcceptsVersion4AndIgnoresUnknownKeys) {
  SlsHeader h = sample();
  h.jsonversion = 4;
  std::string text = format_sls_header(h);
  EXPECT_EQ(text.find("rx_roi"), std::string::npos);
  // A 6.x header with its old key names and a key glint has never heard of.
  auto j = nlohmann::json::parse(text);
  j["bunchId"] = 7;
  j["somethingNew"] = {{"a", 1}};
  const auto p = parse_sls_header(j.dump());
  ASSERT_TRUE(p.header) << p.detail;
  EXPECT_EQ(p.header->jsonversion, 4u);
  EXPECT_EQ(p.header->frame_number, h.frame_number);
}

TEST(SlsStream, EndMessage) {
  const auto p = parse_sls_header(format_sls_end());
  ASSERT_TRUE(p.header);
  EXPECT_TRUE(p.header->is_end());
}

TEST(SlsStream, RejectsWithReason) {
  auto p = parse_sls_header("{\"jsonversion\":5,\"bitmode\":1");
  EXPECT_FALSE(p.header);
  EXPECT_EQ(p.reason, BadInput::malformed_json);
  p = parse_sls_header("[1,2]");
  EXPECT_EQ(p.reason, BadInput::malformed_json);
  auto j = nlohmann::json::parse(format_sls_header(sample()));
  for (const char* key : {"frameNumber", "shape", "detshape", "size", "bitmode", "row", "column", "data"}) {
    auto k = j;
    k.erase(key);
    p = parse_sls_header(k.dump());
    EXPECT_FALSE(p.header) << key;
    EXPECT_EQ(p.reason, BadInput::missing_field) << key;
    EXPECT_NE(p.detail.find(key), std::string::npos) << p.detail;
  }
  auto k = j;
  k["shape"] = "400x200";
  EXPECT_EQ(parse_sls_header(k.dump()).reason, BadInput::missing_field);
  k = j;
  k["frameNumber"] = -4;
  EXPECT_EQ(parse_sls_header(k.dump()).reason, BadInput::missing_field);
}

namespace {

/// An independent reading of a header with nlohmann::json, written from docs/stream-format.md:
/// the header it gives, or std::nullopt plus the rejection's kind.
struct Expected {
  std::optional<SlsHeader> header;
  BadInput reason = BadInput::malformed_json;
};

/// Finds integer literals beyond 64 bits (which nlohmann reads as floats).
struct BigIntegerFinder : nlohmann::json_sax<nlohmann::json> {
  bool found = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t& text) override {
    if (text.find_first_of(".eE") == string_t::npos) found = true;
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

Expected expected_parse(std::string text) {
  using nlohmann::json;
  Expected r;
  // A C string's terminating NUL may come with the text.
  while (!text.empty() && text.back() == '\0') text.pop_back();
  // Integers must fit 64 bits.
  BigIntegerFinder big;
  if (json::sax_parse(text, &big) && big.found) return r;
  // The last value of a repeated key counts; nlohmann keeps the last too.
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return r;
  r.reason = BadInput::missing_field;
  // Fields of 32 bits: a larger value is out of range, never truncated.
  const std::set<std::string> narrow{"jsonversion", "bitmode", "completeImage", "modId", "row",
                                     "column", "detSpec2", "detSpec3", "detSpec4", "detType",
                                     "version", "flipRows", "quad"};
  const auto uint = [&](const char* key, bool required, uint64_t fallback,
                        uint64_t& out) -> bool {
    const auto it = j.find(key);
    if (it == j.end()) {
      out = fallback;
      return !required;
    }
    if (it->is_number_unsigned()) out = it->get<uint64_t>();
    else if (it->is_number_integer() && it->get<int64_t>() >= 0) out = static_cast<uint64_t>(it->get<int64_t>());
    else if (it->is_number_float() && it->get<double>() >= 0 && it->get<double>() < 0x1p64)
      out = static_cast<uint64_t>(it->get<double>());
    else return false;
    if (narrow.contains(key) && out > 0xFFFFFFFFu) {
      r.reason = BadInput::out_of_range;
      return false;
    }
    return true;
  };
  const auto pair = [&](const char* key, std::array<uint32_t, 2>& out) -> bool {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2) return false;
    for (int i = 0; i < 2; ++i) {
      if (!(*it)[i].is_number_unsigned()) return false;
      if ((*it)[i].get<uint64_t>() > 0xFFFFFFFFu) {
        r.reason = BadInput::out_of_range;
        return false;
      }
      out[i] = (*it)[i].get<uint32_t>();
    }
    return true;
  };
  SlsHeader h;
  uint64_t v = 0;
  // data: exactly the integer 0 or 1; another number is out of range, anything else missing.
  const auto data = j.find("data");
  if (data == j.end() || !data->is_number()) return r;
  if (!data->is_number_integer() || data->get<int64_t>() < 0 || data->get<int64_t>() > 1 ||
      (data->is_number_unsigned() && data->get<uint64_t>() > 1)) {
    r.reason = BadInput::out_of_range;
    return r;
  }
  h.data = static_cast<uint32_t>(data->get<uint64_t>());
  if (!uint("jsonversion", false, 0, v)) return r;
  h.jsonversion = static_cast<uint32_t>(v);
  if (h.is_end()) {
    r.header = h;
    return r;
  }
  const struct {
    const char* key;
    bool required;
    uint64_t fallback;
    std::function<void(uint64_t)> set;
  } fields[] = {
      {"bitmode", true, 0, [&](uint64_t x) { h.bitmode = static_cast<uint32_t>(x); }},
      {"fileIndex", false, 0, [&](uint64_t x) { h.file_index = x; }},
      {"detshape", true, 0, {}},  // checked here, in the parser's order
      {"shape", true, 0, {}},
      {"size", true, 0, [&](uint64_t x) { h.size = x; }},
      {"acqIndex", false, 0, [&](uint64_t x) { h.acq_index = x; }},
      {"frameIndex", false, 0, [&](uint64_t x) { h.frame_index = x; }},
      {"completeImage", false, 1, [&](uint64_t x) { h.complete_image = static_cast<uint32_t>(x); }},
      {"frameNumber", true, 0, [&](uint64_t x) { h.frame_number = x; }},
      {"expLength", false, 0, [&](uint64_t x) { h.exp_length = x; }},
      {"packetNumber", false, 0, [&](uint64_t x) { h.packet_number = x; }},
      {"detSpec1", false, 0, [&](uint64_t x) { h.det_spec1 = x; }},
      {"timestamp", false, 0, [&](uint64_t x) { h.timestamp = x; }},
      {"modId", false, 0, [&](uint64_t x) { h.mod_id = static_cast<uint32_t>(x); }},
      {"row", true, 0, [&](uint64_t x) { h.row = static_cast<uint32_t>(x); }},
      {"column", true, 0, [&](uint64_t x) { h.column = static_cast<uint32_t>(x); }},
      {"detSpec2", false, 0, [&](uint64_t x) { h.det_spec2 = static_cast<uint32_t>(x); }},
      {"detSpec3", false, 0, [&](uint64_t x) { h.det_spec3 = static_cast<uint32_t>(x); }},
      {"detSpec4", false, 0, [&](uint64_t x) { h.det_spec4 = static_cast<uint32_t>(x); }},
      {"detType", false, 0, [&](uint64_t x) { h.det_type = static_cast<uint32_t>(x); }},
      {"version", false, 0, [&](uint64_t x) { h.version = static_cast<uint32_t>(x); }},
      {"flipRows", false, 0, [&](uint64_t x) { h.flip_rows = static_cast<uint32_t>(x); }},
      {"quad", false, 0, [&](uint64_t x) { h.quad = static_cast<uint32_t>(x); }},
  };
  for (const auto& f : fields) {
    if (!f.set) {
      if (!pair(f.key, std::string_view(f.key) == "shape" ? h.shape : h.detshape)) return r;
      continue;
    }
    if (!uint(f.key, f.required, f.fallback, v)) return r;
    f.set(v);
  }
  if (auto it = j.find("progress"); it != j.end() && it->is_number()) h.progress = it->get<double>();
  if (auto it = j.find("fname"); it != j.end() && it->is_string()) h.fname = it->get<std::string>();
  if (auto it = j.find("addJsonHeader"); it != j.end() && it->is_object())
    for (auto& [k, x] : it->items()) h.add_json_header[k] = x.is_string() ? x.get<std::string>() : x.dump();
  if (auto it = j.find("rx_roi"); it != j.end() && it->is_array() && it->size() == 4)
    for (int i = 0; i < 4; ++i)
      if ((*it)[i].is_number_integer()) h.rx_roi[i] = (*it)[i].get<int>();
  r.header = h;
  return r;
}

void expect_as_specified(const std::string& text) {
  const Expected e = expected_parse(text);
  const ParsedHeader p = parse_sls_header(text);
  ASSERT_EQ(p.header.has_value(), e.header.has_value()) << text << "\n" << p.detail;
  if (e.header) {
    EXPECT_TRUE(*p.header == *e.header) << text;
  } else {
    EXPECT_EQ(p.reason, e.reason) << text << "\n" << p.detail;
    EXPECT_FALSE(p.detail.empty());
  }
}

SlsHeader random_header(std::mt19937_64& rng, bool plain_strings) {
  SlsHeader h;
  auto u = [&](uint64_t max) { return std::uniform_int_distribution<uint64_t>(0, max)(rng); };
  h.jsonversion = u(1) ? 5 : 4;
  h.bitmode = std::array<uint32_t, 5>{4, 8, 12, 16, 32}[u(4)];
  h.file_index = u(1000);
  h.detshape = {static_cast<uint32_t>(u(4)), static_cast<uint32_t>(u(4))};
  h.shape = {static_cast<uint32_t>(u(1024)), static_cast<uint32_t>(u(1024))};
  h.size = u(~uint64_t{0});
  h.acq_index = u(10);
  h.frame_index = u(~uint64_t{0});
  h.progress = static_cast<double>(u(10000)) / 100.0;
  h.fname = plain_strings ? "/data/run_" + std::to_string(u(99)) : "/data/r\u00e9n \"" + std::to_string(u(99)) + "\"";
  h.data = u(20) == 0 ? 0 : 1;
  h.complete_image = static_cast<uint32_t>(u(1));
  h.frame_number = u(~uint64_t{0});
  h.exp_length = u(1000000);
  h.packet_number = u(64);
  h.det_spec1 = u(~uint64_t{0});
  h.timestamp = u(~uint64_t{0});
  h.mod_id = static_cast<uint32_t>(u(31));
  h.row = static_cast<uint32_t>(u(3));
  h.column = static_cast<uint32_t>(u(3));
  h.det_spec2 = static_cast<uint32_t>(u(0xFFFFFFFF));
  h.det_type = static_cast<uint32_t>(u(20));
  h.version = static_cast<uint32_t>(u(3));
  h.flip_rows = static_cast<uint32_t>(u(1));
  h.quad = static_cast<uint32_t>(u(1));
  for (uint64_t k = u(3); k > 0; --k) h.add_json_header["key" + std::to_string(k)] = "value " + std::to_string(u(9));
  h.rx_roi = {static_cast<int>(u(800)) - 400, static_cast<int>(u(400)), -1, static_cast<int>(u(400))};
  return h;
}

}  // namespace

TEST(SlsStream, SlsReceiverHeadersReadBackExactly) {
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 300; ++i) {
    const SlsHeader h = random_header(rng, /*plain_strings=*/i % 2 == 0);
    const std::string text = format_sls_header(h);
    const ParsedHeader p = parse_sls_header(text);
    ASSERT_TRUE(p.header) << text << "\n" << p.detail;
    if (h.is_end()) {
      EXPECT_TRUE(p.header->is_end());
    } else {
      SlsHeader sent = h;
      if (h.jsonversion == 4) sent.rx_roi = {-1, -1, -1, -1};  // version 4 has no rx_roi
      EXPECT_TRUE(*p.header == sent) << text;
    }
    expect_as_specified(text);
    // The same header re-serialised (keys sorted, then indented), with keys glint ignores.
    auto j = nlohmann::json::parse(text);
    j["bunchId"] = i;
    j["note"] = "x";
    j["flag"] = i % 2 == 0;
    j["nothing"] = nullptr;
    j["ratio"] = -1.5e-3;
    j["extra"] = nlohmann::json::parse(R"({"a":[1,{"b":null}]})");
    for (const std::string& t : {j.dump(), j.dump(2)}) {
      const ParsedHeader q = parse_sls_header(t);
      ASSERT_TRUE(q.header) << t;
      EXPECT_TRUE(*q.header == *p.header) << t;
    }
  }
  for (uint32_t v : {4u, 5u}) {
    const ParsedHeader e = parse_sls_header(format_sls_end(v));
    ASSERT_TRUE(e.header);
    EXPECT_TRUE(e.header->is_end());
    EXPECT_EQ(e.header->jsonversion, v);
  }
}

TEST(SlsStream, UnusualButValidHeaders) {
  std::mt19937_64 rng(7);
  const SlsHeader h = random_header(rng, true);
  const std::string base = format_sls_header(h);
  const std::string body = base.substr(0, base.rfind('}'));
  const auto parse = [&](const std::string& extra) { return parse_sls_header(body + extra + "}\n"); };
  // A key given twice counts with its last value.
  if (!h.is_end()) {
    EXPECT_EQ(parse(",\"frameNumber\":5").header->frame_number, 5u);
    // A float where an integer is expected is truncated; a negative one is rejected.
    EXPECT_EQ(parse(",\"frameNumber\":7.9").header->frame_number, 7u);
    EXPECT_EQ(parse(",\"size\":-1").reason, BadInput::missing_field);
    EXPECT_EQ(parse(",\"shape\":[1.5,2]").reason, BadInput::missing_field);
    EXPECT_EQ(parse(",\"shape\":[1,2,3]").reason, BadInput::missing_field);
    // Non-string addJsonHeader values are kept as their JSON text; a short rx_roi is ignored.
    const ParsedHeader a = parse(",\"addJsonHeader\":{\"n\":3,\"l\":[1, 2]},\"rx_roi\":[1,2,3]");
    ASSERT_TRUE(a.header);
    EXPECT_EQ(a.header->add_json_header.at("n"), "3");
    EXPECT_EQ(a.header->add_json_header.at("l"), "[1,2]");
    EXPECT_EQ(a.header->rx_roi, (std::array<int, 4>{-1, -1, -1, -1}));  // the last rx_roi counts
  }
  // Escapes are decoded.
  SlsHeader e = random_header(rng, /*plain_strings=*/false);
  e.data = 1;
  const ParsedHeader d = parse_sls_header(format_sls_header(e));
  ASSERT_TRUE(d.header);
  EXPECT_EQ(d.header->fname, e.fname);
  for (const char* extra : {",\"frameNumber\":5", ",\"frameNumber\":5.0", ",\"extra\":{\"a\":[1]}",
                                   ",\"extra\":[1,2]", ",\"addJsonHeader\":{\"n\":3}", ",\"size\":-1",
                                   ",\"rx_roi\":[1,2,3]", ",\"progress\":\"x\""})
    expect_as_specified(body + extra + "}\n");
}

TEST(SlsStream, DamagedHeadersAreRejectedAsSpecified) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 3; ++i) {
    const std::string text = format_sls_header(random_header(rng, true));
    // Every truncation, and every byte replaced by characters that matter to JSON.
    for (std::size_t n = 0; n <= text.size(); ++n) expect_as_specified(text.substr(0, n));
    for (std::size_t at = 0; at < text.size(); ++at)
      for (char c : {'"', '}', '{', ']', ',', ':', '-', '0', '7', '.', 'e', 'x', ' ', '\\', '\0', '\x80', '\x01'}) {
        std::string t = text;
        t[at] = c;
        expect_as_specified(t);
      }
  }
}

TEST(SlsStream, PayloadBytesPerBitmode) {
  EXPECT_EQ(payload_bytes(16, 400 * 400), 320000u);
  EXPECT_EQ(payload_bytes(32, 10), 40u);
  EXPECT_EQ(payload_bytes(8, 10), 10u);
  EXPECT_EQ(payload_bytes(4, 10), 5u);
  EXPECT_EQ(payload_bytes(4, 11), 6u);
  EXPECT_TRUE(is_valid_bitmode(4));
  // EIGER's 12-bit mode: two pixels in three bytes (a 256 x 512 port: 196,608 bytes).
  EXPECT_TRUE(is_valid_bitmode(12));
  EXPECT_EQ(payload_bytes(12, 256 * 512), 196608u);
  EXPECT_EQ(payload_bytes(12, 10), 15u);
  EXPECT_EQ(payload_bytes(12, 11), 17u);
  EXPECT_FALSE(is_valid_bitmode(24));
  EXPECT_FALSE(is_valid_bitmode(0));
}

TEST(SlsStream, Decode12BitAsSlsConsumersUnpackIt) {
  // Pixels 2k and 2k+1 in bytes b0 b1 b2: 2k = b0 | (b1 & 0xF) << 8, 2k+1 = b1 >> 4 | b2 << 4.
  const std::vector<std::byte> b{std::byte{0xBC}, std::byte{0x3A}, std::byte{0x12},
                                 std::byte{0x01}, std::byte{0xF0}, std::byte{0xFF}};
  uint16_t out[4] = {};
  decode_row(12, b.data(), 0, 4, out);
  EXPECT_EQ(out[0], 0xABC);
  EXPECT_EQ(out[1], 0x123);
  EXPECT_EQ(out[2], 0x001);
  EXPECT_EQ(out[3], 0xFFF);
  // A row may start at an odd pixel (mid-byte).
  decode_row(12, b.data(), 1, 2, out);
  EXPECT_EQ(out[0], 0x123);
  EXPECT_EQ(out[1], 0x001);
  // The virtual EIGER server's test pattern: pixel i holds i.
  std::vector<std::byte> pattern(payload_bytes(12, 4096));
  for (std::size_t i = 0; i < 4096; i += 2) {
    auto* p = reinterpret_cast<uint8_t*>(pattern.data()) + i / 2 * 3;
    p[0] = static_cast<uint8_t>(i & 0xFF);
    p[1] = static_cast<uint8_t>(((i >> 8) & 0xF) | ((i + 1) & 0xF) << 4);
    p[2] = static_cast<uint8_t>(((i + 1) >> 4) & 0xFF);
  }
  std::vector<uint16_t> px(4096);
  decode_row(12, pattern.data(), 0, px.size(), px.data());
  for (std::size_t i = 0; i < px.size(); ++i) ASSERT_EQ(px[i], i);
  // Encoding gives the same bytes; values over 12 bits saturate at 4095.
  std::vector<std::byte> again(pattern.size());
  encode_pixels(12, px, again.data());
  EXPECT_EQ(again, pattern);
  const std::vector<uint16_t> big{5000, 4095, 0};
  std::vector<std::byte> packed(payload_bytes(12, big.size()), std::byte{0xEE});
  encode_pixels(12, big, packed.data());
  EXPECT_EQ(packed, (std::vector<std::byte>{std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF},
                                            std::byte{0x00}, std::byte{0x00}}));
}

TEST(SlsStream, HeaderIntegersAreCheckedAtTheirWidth) {
  EXPECT_EQ(to_string(BadInput::out_of_range), "out_of_range");
  const auto j = nlohmann::json::parse(format_sls_header(sample()));
  const auto with = [&](const char* key, const nlohmann::json& value) {
    auto k = j;
    k[key] = value;
    return parse_sls_header(k.dump());
  };
  const uint64_t two32 = uint64_t{1} << 32;
  // Read as [100, 100], row 0, bitmode 16 and an end by a 32-bit reading.
  auto p = with("shape", {two32 + 100, 100});
  EXPECT_FALSE(p.header);
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "shape[0] = 4294967396 (allowed: 0 to 4294967295)");
  p = with("detshape", {1, two32 + 2});
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "detshape[1] = 4294967298 (allowed: 0 to 4294967295)");
  p = with("row", two32);
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "row = 4294967296 (allowed: 0 to 4294967295)");
  p = with("bitmode", two32 + 16);
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "bitmode = 4294967312 (allowed: 0 to 4294967295)");
  // data is exactly the integer 0 or 1: anything else is bad input, never an end.
  p = with("data", two32);
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "data = 4294967296 (allowed: the integer 0 or 1)");
  p = with("data", 0.5);
  EXPECT_EQ(p.reason, BadInput::out_of_range);
  EXPECT_EQ(p.detail, "data = 0.5 (allowed: the integer 0 or 1)");
  for (const nlohmann::json& v : {nlohmann::json(2), nlohmann::json(-1), nlohmann::json(1.0),
                                  nlohmann::json(0.0), nlohmann::json(two32 + 1)}) {
    p = with("data", v);
    EXPECT_FALSE(p.header) << v;
    EXPECT_EQ(p.reason, BadInput::out_of_range) << v;
  }
  EXPECT_EQ(with("data", "0").reason, BadInput::missing_field);
  EXPECT_EQ(with("data", true).reason, BadInput::missing_field);
  auto end = nlohmann::json::parse(format_sls_end());
  end["data"] = 0.5;
  EXPECT_EQ(parse_sls_header(end.dump()).reason, BadInput::out_of_range);
  // Every 32-bit field: 2^32 - 1 is read exactly, 2^32 (or a float that large) is out of range.
  for (const char* key : {"jsonversion", "bitmode", "completeImage", "modId", "row", "column",
                          "detSpec2", "detSpec3", "detSpec4", "detType", "version", "flipRows",
                          "quad"}) {
    p = with(key, two32);
    EXPECT_EQ(p.reason, BadInput::out_of_range) << key;
    EXPECT_EQ(p.detail, fmt::format("{} = 4294967296 (allowed: 0 to 4294967295)", key));
    p = with(key, 4294967296.5);
    EXPECT_EQ(p.reason, BadInput::out_of_range) << key;
    EXPECT_EQ(p.detail.rfind(fmt::format("{} = 4294967296.5", key), 0), 0u) << p.detail;
    p = with(key, two32 - 1);
    ASSERT_TRUE(p.header) << key << ": " << p.detail;
  }
  EXPECT_EQ(with("row", two32 - 1).header->row, 0xFFFFFFFFu);
  EXPECT_EQ(with("quad", two32 - 1).header->quad, 0xFFFFFFFFu);
  // 64-bit fields keep their width.
  EXPECT_EQ(with("frameNumber", two32 + 7).header->frame_number, two32 + 7);
  EXPECT_EQ(with("size", two32).header->size, two32);
}

TEST(SlsStream, DarkMarkersAndFlippedRows) {
  SlsHeader h = sample();
  EXPECT_TRUE(h.marked_dark());
  h.add_json_header["frameMode"] = "newPedestal";
  EXPECT_TRUE(h.marked_dark());
  for (const char* mode : {"frame", "data", "raw", "Pedestal", ""}) {
    h.add_json_header["frameMode"] = mode;
    EXPECT_FALSE(h.marked_dark()) << mode;
  }
  h.add_json_header.clear();
  EXPECT_FALSE(h.marked_dark());
  // flipRows is applied to EIGER (detType 1) only, as the sls consumer does.
  h.flip_rows = 1;
  h.det_type = 5;
  EXPECT_FALSE(h.rows_flipped());
  h.det_type = 1;
  EXPECT_TRUE(h.rows_flipped());
  h.flip_rows = 0;
  EXPECT_FALSE(h.rows_flipped());
}

TEST(SlsStream, DecodeEveryBitmode) {
  // 16: little-endian copy
  const std::vector<std::byte> b16{std::byte{0x34}, std::byte{0x12}, std::byte{0xFF}, std::byte{0xFF}};
  uint16_t out[4] = {};
  decode_row(16, b16.data(), 0, 2, out);
  EXPECT_EQ(out[0], 0x1234);
  EXPECT_EQ(out[1], 0xFFFF);
  // 8: widened
  const std::vector<std::byte> b8{std::byte{7}, std::byte{200}, std::byte{255}};
  decode_row(8, b8.data(), 1, 2, out);
  EXPECT_EQ(out[0], 200);
  EXPECT_EQ(out[1], 255);
  // 32: saturated at 65535
  std::vector<std::byte> b32(8);
  const uint32_t v32[2] = {70000, 65534};
  std::memcpy(b32.data(), v32, 8);
  decode_row(32, b32.data(), 0, 2, out);
  EXPECT_EQ(out[0], 65535);
  EXPECT_EQ(out[1], 65534);
  // 4: high nibble first, a row may start mid-byte
  const std::vector<std::byte> b4{std::byte{0xAB}, std::byte{0xC1}};
  decode_row(4, b4.data(), 0, 4, out);
  EXPECT_EQ(out[0], 0xA);
  EXPECT_EQ(out[1], 0xB);
  EXPECT_EQ(out[2], 0xC);
  EXPECT_EQ(out[3], 0x1);
  decode_row(4, b4.data(), 1, 2, out);
  EXPECT_EQ(out[0], 0xB);
  EXPECT_EQ(out[1], 0xC);
}

TEST(SlsStream, EncodeIsTheInverseOfDecode) {
  const std::vector<uint16_t> px{0, 1, 9, 15, 14, 3, 7};
  for (uint32_t bm : {4u, 8u, 12u, 16u, 32u}) {
    std::vector<std::byte> buf(payload_bytes(bm, px.size()));
    encode_pixels(bm, px, buf.data());
    std::vector<uint16_t> back(px.size());
    decode_row(bm, buf.data(), 0, px.size(), back.data());
    EXPECT_EQ(back, px) << bm;
  }
}

TEST(SlsStream, OversizeHeadersAreRefusedUnparsed) {
  const std::string text = format_sls_header(sample());
  // Padded with whitespace (still valid JSON) up to the limit: parsed.
  std::string at_limit = text + std::string(kMaxSlsHeaderBytes - text.size(), ' ');
  ASSERT_EQ(at_limit.size(), kMaxSlsHeaderBytes);
  ASSERT_TRUE(parse_sls_header(at_limit).header.has_value());
  EXPECT_EQ(*parse_sls_header(at_limit).header, sample());
  // One byte more: oversize, whatever it holds.
  const ParsedHeader over = parse_sls_header(at_limit + " ");
  EXPECT_FALSE(over.header.has_value());
  EXPECT_EQ(over.reason, BadInput::oversize);
  EXPECT_EQ(over.detail, "a 65537-byte header (allowed: up to 65536 bytes)");
  EXPECT_EQ(to_string(BadInput::oversize), "oversize");
  // A 400 MB header: refused from its size alone (a parse would take far longer, and the
  // parser's buffers would grow to 400 MB).
  std::string huge(400u << 20, ' ');
  huge.replace(0, text.size(), text);
  // Timed in this thread's CPU time: a busy machine's preemption is not the parser's work.
  const auto thread_cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  const int64_t t0 = thread_cpu_ns();
  const ParsedHeader h = parse_sls_header(huge);
  const int64_t took_ns = thread_cpu_ns() - t0;
  EXPECT_EQ(h.reason, BadInput::oversize);
  EXPECT_EQ(h.detail, "a 419430400-byte header (allowed: up to 65536 bytes)");
  EXPECT_LT(took_ns, 5000000) << "ns of CPU time";
  // The header after it still parses (the per-thread parser is unharmed).
  EXPECT_EQ(*parse_sls_header(text).header, sample());
}

TEST(SlsStream, IngestSocketsRefuseOversizeParts) {
  glint::config::Config cfg;
  cfg.detector.rows = cfg.detector.cols = 40;
  // The largest legal part is a port's image at 32 bits (6,400 bytes) or a header (64 KiB).
  EXPECT_EQ(ingest_max_message_bytes(cfg.detector), 65536u + 65536u);
  glint::config::DetectorConfig jf;
  jf.rows = 1024;
  jf.cols = 1024;
  jf.ports_y = 2;
  EXPECT_EQ(ingest_max_message_bytes(jf), 512u * 1024 * 4 + 65536);

  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  cfg.ingest.endpoints = {ep};
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind(ep);
  FrameAssembler assembler(cfg.detector, cfg.ingest);
  Ingest ingest(cfg, assembler);
  const auto oversize = [&] { return ingest.counters().bad[std::size_t(BadInput::oversize)]; };
  // A 100 KB header: within ZMQ_MAXMSGSIZE, so it arrives, and is counted as oversize.
  const std::string header = "{" + std::string(100000, ' ') + "}";
  auto send = [&](const std::string& first) {
    pub.send(zmq::buffer(first), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(std::string(3200, '\0')), zmq::send_flags::none);
  };
  auto send_until_counted = [&](uint64_t n) {
    for (int i = 0; i < 500 && oversize() < n; ++i) {
      send(header);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  send_until_counted(1);
  ASSERT_GE(oversize(), 1u) << "the subscriber never connected";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t before = oversize();
  ASSERT_EQ(ingest.counters().messages, before);
  // A 2 MiB part: past ZMQ_MAXMSGSIZE, ZeroMQ drops the connection without handing it over
  // (without the option it would arrive and be counted like the header above).
  send("{" + std::string(2u << 20, ' ') + "}");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(oversize(), before);
  EXPECT_EQ(ingest.counters().messages, before);
  // The subscriber reconnects, and what follows arrives again.
  send_until_counted(before + 1);
  // A message is counted as it arrives, then handled; one sent while the last was on its way
  // may still be in the ingest thread: wait for the two counts to settle.
  for (int i = 0; i < 200 && oversize() != ingest.counters().messages; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(oversize(), ingest.counters().messages);
  EXPECT_GT(oversize(), before);
  EXPECT_EQ(ingest.counters().bad_total(), oversize());
  ingest.stop();
}

TEST(SlsStream, CopyStreamingCopiesExactlyAtEveryAlignmentAndLength) {
  std::vector<std::byte> src(70'000), dst(src.size() + 64), want(dst.size());
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131 + 7);
  for (std::size_t so : {0, 1, 8}) {
    for (std::size_t dof = 0; dof < 16; ++dof) {
      for (std::size_t n : {0, 1, 15, 16, 63, 64, 65, 127, 200, 4096 + 3, 69'000}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xEE});
        want = dst;
        std::memcpy(want.data() + dof, src.data() + so, n);
        copy_streaming(dst.data() + dof, src.data() + so, n);
        ASSERT_EQ(dst, want) << "src offset " << so << ", dst offset " << dof << ", " << n
                             << " bytes";
      }
    }
  }
  // decode_row's 16-bit pixels, streamed or not, are the same.
  std::vector<uint16_t> a(1000, 1), b(1000, 2);
  decode_row(16, src.data(), 3, 997, a.data() + 3, true);
  decode_row(16, src.data(), 3, 997, b.data() + 3, false);
  EXPECT_TRUE(std::equal(a.begin() + 3, a.end(), b.begin() + 3));
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(b[0], 2);
}
