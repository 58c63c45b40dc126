// The logging facade: the level set at start filters every message, also those written directly
// with log::write (as the CUDA sources do).
#include <gtest/gtest.h>

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

}  // namespace
