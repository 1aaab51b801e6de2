#include "dice/core/status.h"

namespace dice {
inline namespace core {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kCorrupt: return "Corrupt";
    case StatusCode::kCompileError: return "CompileError";
    case StatusCode::kCudaError: return "CudaError";
    case StatusCode::kNoDevice: return "NoDevice";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kCrashed: return "Crashed";
    case StatusCode::kVerifyFailed: return "VerifyFailed";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "Ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace core
}  // namespace dice
