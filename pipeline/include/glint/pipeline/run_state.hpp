#pragma once
// The one owner of a run's state: idle <- pedestal -> acquiring -> finishing -> idle, any
// running state -> error. Only the transitions below are allowed; stop and abort requests and
// the run's end are recorded here, and waiting for the end uses a condition variable.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

namespace glint::pipeline {

enum class RunState { idle, pedestal, acquiring, finishing, error };
std::string_view to_string(RunState s);

/// Whether a run may go from `from` to `to`: pedestal -> acquiring | finishing | idle | error,
/// acquiring -> finishing | idle | error, finishing -> idle | error. idle and error end a run.
bool allowed(RunState from, RunState to);

class RunStateMachine {
 public:
  /// A run starts in the pedestal state.
  RunStateMachine() = default;
  RunStateMachine(const RunStateMachine&) = delete;
  RunStateMachine& operator=(const RunStateMachine&) = delete;

  RunState state() const { return state_.load(); }
  /// Moves to `to`; throws std::logic_error naming both states when the move is not allowed.
  void to(RunState to);
  /// Moves to `to` only when the run is in `from` now; returns whether it moved.
  bool advance(RunState from, RunState to);
  /// The run failed: records the first failure (and whether it is fatal for the process, see
  /// RunStats::fatal) and moves to error.
  void fail(const std::string& why, bool fatal);
  /// The run's thread has finished: idle unless it failed.
  void end();

  /// Asks the run to end gracefully; the first reason given (stop or abort) is the end reason.
  void request_stop(std::string reason);
  /// The same, with a reason that replaces an earlier graceful one (not an abort): the run ends
  /// on a bound that cut its data (missing_rows) even if it was ending anyway.
  void request_stop_overriding(std::string reason);
  /// Asks the run to end now.
  void request_abort();
  bool stop_requested() const { return stop_.load(); }
  bool abort_requested() const { return abort_.load(); }

  /// The run has opened its file and its inputs (or failed: set_done() wakes the waiters too).
  void set_started();
  /// Waits until set_started() or set_done(), or the timeout; returns whether either happened.
  bool wait_started(std::chrono::milliseconds timeout) const;

  /// The run's thread is done with everything (the file is closed); wakes wait_done().
  void set_done();
  bool done() const { return done_.load(); }
  /// Waits until done() or the timeout; returns done().
  bool wait_done(std::chrono::milliseconds timeout) const;

  std::string error() const;
  bool fatal() const;
  std::string end_reason() const;

 private:
  std::atomic<RunState> state_{RunState::pedestal};
  std::atomic<bool> stop_{false}, abort_{false}, done_{false}, started_{false};
  mutable std::mutex mu_;  ///< guards the strings and the transitions
  mutable std::condition_variable done_cv_;
  std::string error_, end_reason_;
  bool fatal_ = false;
};

}  // namespace glint::pipeline
