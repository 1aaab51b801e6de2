// dice-worker — the process that compiles, verifies and times candidate
// kernels for the user's process (worker_pool.h spawns it; the protocol is in
// worker_protocol.h). It reads framed JSON requests on stdin and writes
// events on stdout until stdin closes or "shutdown" arrives.
//
// Exit codes: 0 = stdin closed or shutdown; 2 = protocol error;
// 3 = a candidate left the CUDA context unusable (a fatal result was sent);
// the parent then respawns a fresh worker.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/device_binding.h"
#include "dice/runtime/worker_protocol.h"
#include "tune_session.h"
#include "verifier.h"

namespace {

dice::runtime::worker::HelloReply MakeHello() {
  dice::runtime::worker::HelloReply h;
  h.pid = static_cast<int>(::getpid());
  h.nvrtc_version = dice::runtime::NvrtcVersion();
  h.torch_version = dice::runtime::worker_impl::LinkedTorchVersion();
  const char* dev_env = std::getenv("DICE_DEVICE");
  h.device_ordinal = dev_env ? std::atoi(dev_env) : 0;
  // Bound by UUID (device_binding.h): the ordinal is where that UUID is here.
  const char* uuid = std::getenv(dice::runtime::kWorkerDeviceUuidEnv);
  if (uuid != nullptr && uuid[0] != '\0') {
    auto table = dice::runtime::QueryDeviceTable();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    auto ordinal = table.ok() ? dice::runtime::FindDeviceByUuid(*table, uuid, visible ? visible : "")
                              : dice::Expected<int>(table.status());
    if (!ordinal.ok()) {
      h.has_device = false;
      h.no_device_reason = ordinal.status().ToString();
      return h;
    }
    h.device_ordinal = *ordinal;
  }
  auto info = dice::runtime::QueryDevice(h.device_ordinal);
  if (info.ok()) {
    h.has_device = true;
    h.device = *info;
  } else {
    h.has_device = false;
    h.no_device_reason = info.status().ToString();
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--version") {
    std::printf("dice-worker protocol %d, torch %s\n", dice::runtime::worker::kProtocolVersion,
                dice::runtime::worker_impl::LinkedTorchVersion().c_str());
    return 0;
  }
  // The protocol owns the original stdout; anything else that prints to
  // stdout (libraries, logs) goes to stderr instead of corrupting frames.
  const int in_fd = STDIN_FILENO;
  const int out_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (out_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::perror("dice-worker: redirecting stdout");
    return 2;
  }
  auto send = [out_fd](const std::string& payload) { return dice::runtime::worker::WriteFrame(out_fd, payload); };

  for (;;) {
    auto frame = dice::runtime::worker::ReadFrame(in_fd, -1);
    if (!frame.ok()) {
      if (frame.status().code() == dice::StatusCode::kCrashed) return 0;  // parent closed the stream
      std::fprintf(stderr, "dice-worker: %s\n", frame.status().ToString().c_str());
      return 2;
    }
    auto req = dice::runtime::worker::DecodeRequest(*frame);
    if (!req.ok()) {
      std::fprintf(stderr, "dice-worker: bad request: %s\n", req.status().ToString().c_str());
      return 2;
    }
    switch (req->type) {
      case dice::runtime::worker::RequestType::kHello:
        if (!send(dice::runtime::worker::EncodeHelloReply(MakeHello())).ok()) return 0;
        break;
      case dice::runtime::worker::RequestType::kShutdown:
        return 0;
      case dice::runtime::worker::RequestType::kTune:
        if (dice::runtime::worker_impl::RunTuneRequest(req->tune, send)) {
          // Fatal CUDA error or parent gone: skip destructors that would
          // touch the broken context.
          std::fflush(stderr);
          ::_exit(3);
        }
        break;
    }
  }
}
