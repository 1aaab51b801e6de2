// dice/runtime/worker_protocol.h — messages between the user's process and
// the dice-worker process (DESIGN.md "Verification": all candidate work runs
// in an exec'd worker with a timeout).
//
// Transport: the worker's stdin and stdout are one end of a Unix stream
// socket pair. Every message is one frame: a 4-byte little-endian payload
// length followed by that many bytes of UTF-8 JSON (nlohmann-json) with a
// "type" field. The parent sends requests; the worker answers with events:
//
//   parent -> worker                 worker -> parent
//   {"type":"hello"}                 {"type":"hello_reply", device facts or no-device reason}
//   {"type":"tune", ...}             {"type":"result", id, outcome "compile_error"} (per failed compile)
//                                    {"type":"baseline", baseline_us}
//                                    {"type":"begin", id}   then   {"type":"result", id, ...}  (per candidate)
//                                    {"type":"done", error}
//   {"type":"shutdown"}              (worker exits 0)
//
// "begin" is sent before a candidate touches the GPU, so when the worker dies
// or hangs the parent knows which candidate was in flight, records it as
// "crashed" / "timeout", respawns the worker and resubmits the rest. A result
// with fatal=true means the worker's CUDA context is unusable (e.g. an
// illegal address) and the worker exits right after sending it.
//
// "progress" is sent only when the tune request has "progress": true (after
// the NVRTC batch and after each batch of nvcc builds, naming the items that
// compiled): a parent that does not ask never sees one, and a worker that
// does not know the field ignores it and sends none, so either side may be
// the older build. The parent counts verified / timed / best from "result".
//
// Captured real inputs travel in a file (normally under /dev/shm) holding
// each task input's bytes back to back (contiguous, TensorSpec::nbytes each),
// capped at kMaxCapturedBytes; cubins travel base64-encoded in the JSON.
// Plain functions over values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/outcome.h"
#include "dice/core/ir.h"
#include "dice/core/base64.h"
#include "dice/core/status.h"

namespace dice::runtime::worker {

/// Bumped when a message changes incompatibly; hello_reply carries it.
inline constexpr int kProtocolVersion = 1;
/// Largest frame either side accepts, bytes (cubins of a whole tune batch fit).
inline constexpr uint32_t kMaxFrameBytes = 1u << 30;
/// Largest captured-input file the parent writes, bytes (2 GiB).
inline constexpr uint64_t kMaxCapturedBytes = 2ull << 30;

// ---------------------------------------------------------------- framing

/// Writes one frame (length + payload) to `fd`, retrying short writes and
/// EINTR. Uses send(MSG_NOSIGNAL) on sockets so a dead peer yields an error,
/// not SIGPIPE. Errors: kInvalidArgument when payload > kMaxFrameBytes;
/// kCrashed when the peer has closed its end (EPIPE/ECONNRESET); kIoError.
Status WriteFrame(int fd, std::string_view payload);

/// Reads one frame from `fd`, waiting at most `timeout_ms` milliseconds in
/// total (negative = no limit) using poll(). Errors: kTimeout when the
/// deadline passes (a partial frame may have been consumed: the stream is
/// then unusable); kCrashed when the peer closed the stream ("end of
/// stream"); kCorrupt when the length exceeds kMaxFrameBytes; kIoError.
Expected<std::string> ReadFrame(int fd, int64_t timeout_ms);

// ---------------------------------------------------------------- values

/// Answer to "hello": what the worker found.
struct HelloReply {
  int protocol_version = kProtocolVersion;
  bool has_device = false;
  std::string no_device_reason;  ///< set when !has_device (e.g. "libcuda.so.1 not found ...")
  DeviceInfo device;             ///< valid when has_device
  int device_ordinal = 0;
  int nvrtc_version = 0;         ///< major*1000 + minor*10
  std::string torch_version;     ///< "2.11.0"
  int pid = 0;
};

/// One candidate of a tune request, with the parent's identifier for it
/// (results carry the same id; ids are stable across resubmissions).
struct TuneItem {
  int id = 0;
  Candidate candidate;
};

/// The "tune" request: verify and time `items` for one task.
struct TuneRequest {
  std::string graph_canonical;           ///< ir::Canonical text
  std::vector<ir::TensorSpec> inputs;    ///< one per graph input
  std::string arch;                      ///< compile target, "sm_90"; must match the worker's device
  int device = 0;                        ///< CUDA ordinal
  /// REQUIRES: every item obeys the precision policy (the Tuner applies it;
  /// the worker does not check it again).
  std::vector<TuneItem> items;
  int trials = 5;                        ///< random-input trials (plus captured inputs)
  bool allow_reduced_precision = false;  ///< precision policy: reduced-precision items get a 10x tolerance
  double budget_s = 60;                  ///< worker starts no new candidate after this many seconds
  bool measure_baseline = true;          ///< time the reference executor and send "baseline"
  double known_baseline_us = 0;          ///< baseline from an earlier worker (used when !measure_baseline)
  std::string captured_path;             ///< file of captured input bytes, "" = none
  uint64_t captured_bytes = 0;           ///< its size, bytes
  double extension_compile_timeout_s = 300;  ///< nvcc limit per extension-form candidate, seconds
  bool progress = false;                 ///< the worker sends "progress" events (compile batches)
};

/// Outcome of one candidate as the worker saw it. `outcome` is one of
/// kCompileError, kVerifyFailed, kCrashed, kSkipped, kVerified (it travels as
/// OutcomeName: "compile_error", ...); the parent adds kTimeout and decides
/// kWinner / kSlower (select_winner.h).
struct CandidateResult {
  int id = 0;
  Outcome outcome = Outcome::kSkipped;
  std::string error;        ///< reason, first lines (empty when verified)
  double compile_ms = 0;    ///< NVRTC (device form) or nvcc (extension form) wall time, milliseconds
  double time_us = 0;       ///< median kernel time, µs (verified only)
  std::string cubin;        ///< ELF bytes (verified only): the cubin, or the shared object of an extension-form candidate
  bool fatal = false;       ///< the worker exits after sending this result
};

enum class RequestType { kHello, kTune, kShutdown };
struct Request {
  RequestType type = RequestType::kHello;
  TuneRequest tune;  ///< when type == kTune
};

enum class EventType { kHelloReply, kBegin, kResult, kBaseline, kDone, kProgress };
struct Event {
  EventType type = EventType::kDone;
  HelloReply hello;         ///< kHelloReply
  int id = -1;              ///< kBegin
  CandidateResult result;   ///< kResult
  double baseline_us = 0;   ///< kBaseline: reference executor median, µs
  std::string error;        ///< kBaseline / kDone: why the batch could not run ("" = fine)
  std::vector<int> compiled_ids;  ///< kProgress: items that compiled in the batch just built
};

// ---------------------------------------------------------------- codecs

std::string EncodeHelloRequest();
std::string EncodeShutdownRequest();
std::string EncodeTuneRequest(const TuneRequest& request);
/// Errors: kCorrupt naming the missing/invalid field.
Expected<Request> DecodeRequest(std::string_view payload);

std::string EncodeHelloReply(const HelloReply& reply);
std::string EncodeBegin(int id);
std::string EncodeResult(const CandidateResult& result);
std::string EncodeBaseline(double baseline_us, const std::string& error);
std::string EncodeDone(const std::string& error);
/// A "progress" event: `compiled_ids` (item ids) compiled in the batch just
/// built (NVRTC for device form, nvcc for a batch of extension form). Sent
/// only when TuneRequest::progress is set.
std::string EncodeProgress(const std::vector<int>& compiled_ids);
/// Errors: kCorrupt naming the missing/invalid field.
Expected<Event> DecodeEvent(std::string_view payload);

// Cubins travel as base64: dice::Base64Encode / Base64Decode (dice/core/base64.h).
using dice::Base64Decode;
using dice::Base64Encode;

}  // namespace dice::runtime::worker
