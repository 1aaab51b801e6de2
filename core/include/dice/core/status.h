// dice/core/status.h — error values that travel inside the library.
//
// Every fallible call in runtime/, cache/ and generator/ returns a Status or an
// Expected<T>; exceptions are used only at the framework boundary (TorchScript
// ops throw c10::Error because PyTorch expects it, the CLI turns a Status into
// an exit code). Status is a small value type; it is cheap to copy and
// thread-compatible (no shared state).
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace dice {
inline namespace core {

/// What went wrong, coarse enough for a caller to branch on.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  ///< malformed input: a spec string, IR text, a flag
  kNotFound,         ///< a file, cache entry or tensor that does not exist
  kUnsupported,      ///< an op, dtype or layout the runtime cannot serve
  kIoError,          ///< a read/write/open failed (errno text in message)
  kCorrupt,          ///< a file or record exists but its content is invalid
  kCompileError,     ///< NVRTC/nvcc rejected a candidate (log in message)
  kCudaError,        ///< a CUDA driver call failed (name of the call + error)
  kNoDevice,         ///< no CUDA driver or no CUDA device on this machine
  kTimeout,          ///< a worker or kernel exceeded its deadline
  kCrashed,          ///< a worker process died (signal in message)
  kVerifyFailed,     ///< a candidate produced wrong results
  kInternal,         ///< a bug in this library
};

/// Human-readable name of a StatusCode ("InvalidArgument", ...).
const char* StatusCodeName(StatusCode code);

/// Result of a fallible operation: kOk, or a code plus a message naming the
/// cause (file, tensor, op, flag). Follows the LevelDB Status idiom.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// "InvalidArgument: bad --input spec '12xq:f32'".
  std::string ToString() const;

  /// Returns a copy whose message is prefixed by `context + ": "`.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value or the Status saying why there is none. REQUIRES: value() only
/// when ok(); status() is Ok when a value is held.
template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {        // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Expected built from Ok status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace core
}  // namespace dice

/// Propagates a non-Ok Status out of the enclosing function.
#define DICE_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::dice::Status _dice_st = (expr);         \
    if (!_dice_st.ok()) return _dice_st;      \
  } while (0)
