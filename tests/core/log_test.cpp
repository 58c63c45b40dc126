// The logging facade: the level set at start filters every message, also those written directly
// with log::write (as the CUDA sources do).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "glint/log.hpp"

namespace {

namespace log = glint::log;

std::string written_at(log::Level threshold, log::Level message_level, const std::string& text) {
  const log::Level saved = log::level();
  log::set_level(threshold);
  testing::internal::CaptureStderr();
  log::write(message_level, text);
  const std::string out = testing::internal::GetCapturedStderr();
  log::set_level(saved);
  return out;
}

TEST(Log, WriteBelowTheLevelIsDropped) {
  EXPECT_EQ(written_at(log::Level::warn, log::Level::debug, "segment plan"), "");
  EXPECT_EQ(written_at(log::Level::off, log::Level::critical, "gone"), "");
}

TEST(Log, WriteAtOrAboveTheLevelIsShown) {
  EXPECT_NE(written_at(log::Level::warn, log::Level::warn, "dropped 3 frames").find("dropped 3 frames"),
            std::string::npos);
  EXPECT_NE(written_at(log::Level::debug, log::Level::error, "run failed").find("run failed"),
            std::string::npos);
}

TEST(Log, ParseLevelNamesAndRejectsOthers) {
  EXPECT_EQ(log::parse_level("warning"), log::Level::warn);
  EXPECT_EQ(log::parse_level("trace"), log::Level::trace);
  EXPECT_THROW(log::parse_level("verbose"), std::invalid_argument);
}

TEST(Log, EveryMessageIsOneLineWithControlCharactersEscaped) {
  // A forged second line (as a run name or stream header from outside could carry) stays on
  // the first one, visibly escaped.
  const std::string out = written_at(log::Level::info, log::Level::info,
                                     "run x\n2026-01-01T00:00:00.000 info fake\r\t\x1b[2J\x7f");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("run x\\n2026-01-01T00:00:00.000 info fake\\r\\t\\x1b[2J\\x7f"),
            std::string::npos)
      << out;
  EXPECT_EQ(log::one_line(std::string("a\0b\nc", 5)), "a\\x00b\\nc");
  EXPECT_EQ(log::one_line("caf\xc3\xa9 /tmp/runs"), "caf\xc3\xa9 /tmp/runs");  // UTF-8 kept
}

}  // namespace
