// worker_protocol.cc — framing and JSON codecs of the parent <-> dice-worker
// protocol (worker_protocol.h).
#include "dice/runtime/worker_protocol.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

namespace dice::runtime::worker {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

Status WriteAll(int fd, const char* data, size_t n) {
  bool use_send = true;
  while (n > 0) {
    ssize_t w = use_send ? ::send(fd, data, n, MSG_NOSIGNAL) : ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOTSOCK && use_send) {  // a pipe or file: plain write
        use_send = false;
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        return Status(StatusCode::kCrashed, "peer closed the stream (write: " + std::string(strerror(errno)) + ")");
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return Status(StatusCode::kIoError, std::string("write to worker stream: ") + strerror(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Reads exactly n bytes before `deadline` (time_point::max() = no limit).
Status ReadAll(int fd, char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    int wait_ms = -1;
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Status(StatusCode::kTimeout, "no message from the worker before the deadline");
      wait_ms = static_cast<int>(std::min<int64_t>(left, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kIoError, std::string("poll on worker stream: ") + strerror(errno));
    }
    if (pr == 0) continue;  // re-check the deadline
    ssize_t r = ::read(fd, data, n);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) return Status(StatusCode::kCrashed, "end of stream (connection reset)");
      return Status(StatusCode::kIoError, std::string("read from worker stream: ") + strerror(errno));
    }
    if (r == 0) return Status(StatusCode::kCrashed, "end of stream");
    data += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

json SpecToJson(const ir::TensorSpec& s) {
  return {{"dtype", ir::DTypeName(s.dtype)}, {"shape", s.shape}, {"strides", s.strides}, {"alignment", s.alignment}};
}

ir::TensorSpec SpecFromJson(const json& j) {  // throws json::exception / std::runtime_error
  ir::TensorSpec s;
  auto dt = ir::ParseDType(j.at("dtype").get<std::string>());
  if (!dt.ok()) throw std::runtime_error(dt.status().message());
  s.dtype = *dt;
  s.shape = j.at("shape").get<std::vector<int64_t>>();
  s.strides = j.at("strides").get<std::vector<int64_t>>();
  s.alignment = j.value("alignment", int64_t{16});
  if (s.strides.size() != s.shape.size()) throw std::runtime_error("tensor spec: strides and shape differ in rank");
  return s;
}

json CandidateToJson(const Candidate& c) {
  return {{"origin", c.origin},
          {"form", static_cast<int>(c.form)},
          {"source", c.source},
          {"plan", c.plan.ToJson()},
          {"flags", c.extra_flags},
          {"reduced_precision", c.reduced_precision}};
}

Candidate CandidateFromJson(const json& j) {
  Candidate c;
  c.origin = j.at("origin").get<std::string>();
  c.form = static_cast<CandidateForm>(j.at("form").get<int>());
  c.source = j.at("source").get<std::string>();
  // Extension-form candidates have no launch plan (the shared object's
  // dice_forward launches its own kernels): an empty plan travels as is.
  if (c.form == CandidateForm::kDevice) {
    auto plan = LaunchPlan::FromJson(j.at("plan").get<std::string>());
    if (!plan.ok()) throw std::runtime_error(plan.status().message());
    c.plan = std::move(*plan);
  }
  c.extra_flags = j.at("flags").get<std::vector<std::string>>();
  c.reduced_precision = j.value("reduced_precision", false);
  return c;
}

Expected<json> ParseObject(std::string_view payload) {
  json j = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status(StatusCode::kCorrupt, "worker message is not a JSON object with a 'type'");
  }
  return j;
}

}  // namespace

Status WriteFrame(int fd, std::string_view payload) {
  if (payload.size() > kMaxFrameBytes) {
    return Status(StatusCode::kInvalidArgument,
                  "worker message of " + std::to_string(payload.size()) + " bytes exceeds the frame limit");
  }
  uint32_t n = static_cast<uint32_t>(payload.size());
  char header[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                    static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  DICE_RETURN_IF_ERROR(WriteAll(fd, header, 4));
  return WriteAll(fd, payload.data(), payload.size());
}

Expected<std::string> ReadFrame(int fd, int64_t timeout_ms) {
  Clock::time_point deadline =
      timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
  unsigned char header[4];
  DICE_RETURN_IF_ERROR(ReadAll(fd, reinterpret_cast<char*>(header), 4, deadline));
  uint32_t n = static_cast<uint32_t>(header[0]) | (static_cast<uint32_t>(header[1]) << 8) |
               (static_cast<uint32_t>(header[2]) << 16) | (static_cast<uint32_t>(header[3]) << 24);
  if (n > kMaxFrameBytes) {
    return Status(StatusCode::kCorrupt, "worker frame length " + std::to_string(n) + " exceeds the limit");
  }
  std::string payload(n, '\0');
  DICE_RETURN_IF_ERROR(ReadAll(fd, payload.data(), n, deadline));
  return payload;
}

// ---------------------------------------------------------------- requests

std::string EncodeHelloRequest() { return json{{"type", "hello"}}.dump(); }
std::string EncodeShutdownRequest() { return json{{"type", "shutdown"}}.dump(); }

std::string EncodeTuneRequest(const TuneRequest& r) {
  json items = json::array();
  for (const TuneItem& it : r.items) {
    json c = CandidateToJson(it.candidate);
    c["id"] = it.id;
    items.push_back(std::move(c));
  }
  json inputs = json::array();
  for (const auto& s : r.inputs) inputs.push_back(SpecToJson(s));
  json j = {{"type", "tune"},
            {"graph", r.graph_canonical},
            {"inputs", std::move(inputs)},
            {"arch", r.arch},
            {"device", r.device},
            {"items", std::move(items)},
            {"trials", r.trials},
            {"allow_reduced_precision", r.allow_reduced_precision},
            {"budget_s", r.budget_s},
            {"measure_baseline", r.measure_baseline},
            {"known_baseline_us", r.known_baseline_us},
            {"captured_path", r.captured_path},
            {"captured_bytes", r.captured_bytes},
            {"extension_compile_timeout_s", r.extension_compile_timeout_s}};
  if (r.progress) j["progress"] = true;  // absent otherwise: the request reads as before
  return j.dump();
}

Expected<Request> DecodeRequest(std::string_view payload) {
  auto parsed = ParseObject(payload);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  Request req;
  const std::string type = j["type"].get<std::string>();
  if (type == "hello") {
    req.type = RequestType::kHello;
    return req;
  }
  if (type == "shutdown") {
    req.type = RequestType::kShutdown;
    return req;
  }
  if (type != "tune") return Status(StatusCode::kCorrupt, "unknown request type '" + type + "'");
  req.type = RequestType::kTune;
  TuneRequest& t = req.tune;
  try {
    t.graph_canonical = j.at("graph").get<std::string>();
    for (const auto& s : j.at("inputs")) t.inputs.push_back(SpecFromJson(s));
    t.arch = j.at("arch").get<std::string>();
    t.device = j.value("device", 0);
    for (const auto& c : j.at("items")) t.items.push_back(TuneItem{c.at("id").get<int>(), CandidateFromJson(c)});
    t.trials = j.value("trials", 5);
    t.allow_reduced_precision = j.value("allow_reduced_precision", false);
    t.budget_s = j.value("budget_s", 60.0);
    t.measure_baseline = j.value("measure_baseline", true);
    t.known_baseline_us = j.value("known_baseline_us", 0.0);
    t.captured_path = j.value("captured_path", std::string());
    t.captured_bytes = j.value("captured_bytes", uint64_t{0});
    t.extension_compile_timeout_s = j.value("extension_compile_timeout_s", 300.0);
    t.progress = j.value("progress", false);
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorrupt, std::string("tune request: ") + e.what());
  }
  return req;
}

// ---------------------------------------------------------------- events

std::string EncodeHelloReply(const HelloReply& r) {
  json j = {{"type", "hello_reply"},
            {"protocol_version", r.protocol_version},
            {"has_device", r.has_device},
            {"no_device_reason", r.no_device_reason},
            {"device_ordinal", r.device_ordinal},
            {"arch", r.device.arch},
            {"name", r.device.name},
            {"driver_major", r.device.driver_major},
            {"sm_count", r.device.sm_count},
            {"max_smem_per_block_optin", r.device.max_smem_per_block_optin},
            {"uuid", r.device.uuid},
            {"nvrtc_version", r.nvrtc_version},
            {"torch_version", r.torch_version},
            {"pid", r.pid}};
  return j.dump();
}

std::string EncodeBegin(int id) { return json{{"type", "begin"}, {"id", id}}.dump(); }

std::string EncodeResult(const CandidateResult& r) {
  json j = {{"type", "result"},       {"id", r.id},
            {"outcome", OutcomeName(r.outcome)}, {"error", r.error},
            {"compile_ms", r.compile_ms}, {"time_us", r.time_us},
            {"cubin", Base64Encode(r.cubin)}, {"fatal", r.fatal}};
  // Kernel logs may hold bytes that are not UTF-8: replace them rather than fail.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeBaseline(double baseline_us, const std::string& error) {
  return json{{"type", "baseline"}, {"baseline_us", baseline_us}, {"error", error}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeDone(const std::string& error) {
  return json{{"type", "done"}, {"error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string EncodeProgress(const std::vector<int>& compiled_ids) {
  return json{{"type", "progress"}, {"compiled", compiled_ids}}.dump();
}

Expected<Event> DecodeEvent(std::string_view payload) {
  auto parsed = ParseObject(payload);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  Event ev;
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "hello_reply") {
      ev.type = EventType::kHelloReply;
      HelloReply& h = ev.hello;
      h.protocol_version = j.at("protocol_version").get<int>();
      h.has_device = j.at("has_device").get<bool>();
      h.no_device_reason = j.value("no_device_reason", std::string());
      h.device_ordinal = j.value("device_ordinal", 0);
      h.device.arch = j.value("arch", std::string());
      h.device.name = j.value("name", std::string());
      h.device.driver_major = j.value("driver_major", 0);
      h.device.sm_count = j.value("sm_count", 0);
      h.device.max_smem_per_block_optin = j.value("max_smem_per_block_optin", 0);
      h.device.uuid = j.value("uuid", std::string());
      h.nvrtc_version = j.value("nvrtc_version", 0);
      h.torch_version = j.value("torch_version", std::string());
      h.pid = j.value("pid", 0);
    } else if (type == "begin") {
      ev.type = EventType::kBegin;
      ev.id = j.at("id").get<int>();
    } else if (type == "result") {
      ev.type = EventType::kResult;
      CandidateResult& r = ev.result;
      r.id = j.at("id").get<int>();
      const std::string outcome = j.at("outcome").get<std::string>();
      auto parsed_outcome = ParseOutcome(outcome);
      if (!parsed_outcome) return Status(StatusCode::kCorrupt, "worker result: unknown outcome '" + outcome + "'");
      r.outcome = *parsed_outcome;
      r.error = j.value("error", std::string());
      r.compile_ms = j.value("compile_ms", 0.0);
      r.time_us = j.value("time_us", 0.0);
      auto cubin = Base64Decode(j.value("cubin", std::string()));
      if (!cubin.ok()) return cubin.status();
      r.cubin = std::move(*cubin);
      r.fatal = j.value("fatal", false);
      ev.id = r.id;
    } else if (type == "baseline") {
      ev.type = EventType::kBaseline;
      ev.baseline_us = j.at("baseline_us").get<double>();
      ev.error = j.value("error", std::string());
    } else if (type == "done") {
      ev.type = EventType::kDone;
      ev.error = j.value("error", std::string());
    } else if (type == "progress") {
      ev.type = EventType::kProgress;
      ev.compiled_ids = j.value("compiled", std::vector<int>());
    } else {
      return Status(StatusCode::kCorrupt, "unknown worker event type '" + type + "'");
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorrupt, "worker event '" + type + "': " + e.what());
  }
  return ev;
}

}  // namespace dice::runtime::worker
