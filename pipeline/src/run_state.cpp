#include "glint/pipeline/run_state.hpp"

#include <stdexcept>

namespace glint::pipeline {

std::string_view to_string(RunState s) {
  switch (s) {
    case RunState::idle: return "idle";
    case RunState::pedestal: return "pedestal";
    case RunState::acquiring: return "acquiring";
    case RunState::finishing: return "finishing";
    case RunState::error: return "error";
  }
  return "unknown";
}

bool allowed(RunState from, RunState to) {
  using S = RunState;
  switch (from) {
    case S::pedestal:
      return to == S::acquiring || to == S::finishing || to == S::idle || to == S::error;
    case S::acquiring: return to == S::finishing || to == S::idle || to == S::error;
    case S::finishing: return to == S::idle || to == S::error;
    case S::idle:
    case S::error: return false;
  }
  return false;
}

void RunStateMachine::to(RunState to) {
  std::lock_guard lock(mu_);
  const RunState from = state_.load();
  if (!allowed(from, to))
    throw std::logic_error("run state: " + std::string(to_string(from)) + " -> " +
                           std::string(to_string(to)) + " is not allowed");
  state_.store(to);
}

bool RunStateMachine::advance(RunState from, RunState to) {
  std::lock_guard lock(mu_);
  if (state_.load() != from) return false;
  if (!allowed(from, to))
    throw std::logic_error("run state: " + std::string(to_string(from)) + " -> " +
                           std::string(to_string(to)) + " is not allowed");
  state_.store(to);
  return true;
}

void RunStateMachine::fail(const std::string& why, bool fatal) {
  std::lock_guard lock(mu_);
  if (error_.empty()) {
    error_ = why;
    fatal_ = fatal;
  }
  if (state_.load() != RunState::error) state_.store(RunState::error);
}

void RunStateMachine::end() {
  std::lock_guard lock(mu_);
  if (state_.load() != RunState::error) state_.store(RunState::idle);
}

void RunStateMachine::request_stop(std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (end_reason_.empty()) end_reason_ = std::move(reason);
  }
  stop_.store(true);
}

void RunStateMachine::request_stop_overriding(std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (!abort_.load()) end_reason_ = std::move(reason);
  }
  stop_.store(true);
}

void RunStateMachine::request_abort() {
  {
    std::lock_guard lock(mu_);
    if (end_reason_.empty()) end_reason_ = "abort";
  }
  abort_.store(true);
  stop_.store(true);
}

void RunStateMachine::set_done() {
  {
    std::lock_guard lock(mu_);
    done_.store(true);
  }
  done_cv_.notify_all();
}

void RunStateMachine::set_started() {
  {
    std::lock_guard lock(mu_);
    started_.store(true);
  }
  done_cv_.notify_all();
}

bool RunStateMachine::wait_started(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return done_cv_.wait_for(lock, timeout, [&] { return started_.load() || done_.load(); });
}

bool RunStateMachine::wait_done(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return done_cv_.wait_for(lock, timeout, [&] { return done_.load(); });
}

std::string RunStateMachine::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

bool RunStateMachine::fatal() const {
  std::lock_guard lock(mu_);
  return fatal_;
}

std::string RunStateMachine::end_reason() const {
  std::lock_guard lock(mu_);
  return end_reason_;
}

}  // namespace glint::pipeline
