// Data parallelism over a c10d::TCPStore: see dice/training/distributed.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/distributed.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// ProcessGroupNCCL for CUDA ranks where the build has NCCL's header (the
// LibTorch wheel defines USE_C10D_NCCL; nccl.h comes with the CUDA toolkit
// or the nvidia-nccl wheel). Without it CUDA ranks use the store path.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define DICE_HAVE_NCCL 1
#else
#define DICE_HAVE_NCCL 0
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace dice::training {
namespace {

constexpr const char* kAbortKey = "dice/abort";
constexpr const char* kFinishKey = "dice/finish";

Status EnvError(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "data parallel: " + message + " (torchrun sets RANK, WORLD_SIZE, "
                                              "LOCAL_RANK, MASTER_ADDR and MASTER_PORT)");
}

// An integer environment variable; `fallback` when unset or empty.
Expected<int64_t> EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') return EnvError(std::string(name) + "='" + v + "' is not an integer");
  return static_cast<int64_t>(x);
}

std::string Text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace

Expected<DistributedEnv> ReadDistributedEnv() {
  DistributedEnv env;
  auto world = EnvInt("WORLD_SIZE", 1);
  if (!world.ok()) return world.status();
  if (*world < 1 || *world > 65536) return EnvError("WORLD_SIZE=" + std::to_string(*world) + " must be >= 1");
  env.world_size = static_cast<int>(*world);
  if (env.world_size == 1) return env;
  const char* rank_text = std::getenv("RANK");
  if (rank_text == nullptr || *rank_text == '\0') {
    return EnvError("WORLD_SIZE=" + std::to_string(env.world_size) + " is set but RANK is not");
  }
  auto rank = EnvInt("RANK", -1);
  if (!rank.ok()) return rank.status();
  if (*rank < 0 || *rank >= env.world_size) {
    return EnvError("RANK=" + std::to_string(*rank) + " is outside [0, WORLD_SIZE=" + std::to_string(env.world_size) +
                    ")");
  }
  env.rank = static_cast<int>(*rank);
  auto local = EnvInt("LOCAL_RANK", env.rank);
  if (!local.ok()) return local.status();
  if (*local < 0) return EnvError("LOCAL_RANK=" + std::to_string(*local) + " must be >= 0");
  env.local_rank = static_cast<int>(*local);
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') {
    return EnvError("WORLD_SIZE=" + std::to_string(env.world_size) +
                    " is set but MASTER_ADDR is not: set MASTER_ADDR (rank 0's host) and MASTER_PORT, or "
                    "launch with torchrun");
  }
  env.master_addr = addr;
  auto port = EnvInt("MASTER_PORT", 29500);
  if (!port.ok()) return port.status();
  if (*port < 1 || *port > 65535) return EnvError("MASTER_PORT=" + std::to_string(*port) + " is outside 1..65535");
  env.master_port = static_cast<int>(*port);
  return env;
}

std::pair<int64_t, int64_t> ShardRange(int64_t count, int rank, int world_size) {
  const int64_t base = count / world_size, extra = count % world_size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

std::string ParameterDigest(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& t : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const auto* b = reinterpret_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) {
      h ^= b[i];
      h *= 1099511628211ULL;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::chrono::milliseconds collective_timeout{0};
  int64_t sequence = 0;  // collectives issued so far (the same on every rank)
  bool finished = false, aborted = false;
#if DICE_HAVE_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // gradients and weights of CUDA ranks
  torch::Device nccl_device{torch::kCPU};
#endif
};

DataParallel::DataParallel(DistributedEnv env) : env_(std::move(env)), impl_(std::make_unique<Impl>()) {}

DataParallel::~DataParallel() {
  // Rank 0 hosts the store: give the others the chance to read the last
  // collective's values before it goes away (bounded by the timeout).
  if (impl_ && impl_->store && !impl_->finished && !impl_->aborted) (void)Finish();
#if DICE_HAVE_NCCL
  if (impl_ && impl_->nccl) {
    try {
      if (impl_->aborted) {
        impl_->nccl->abort();
      } else {
        impl_->nccl->shutdown();
      }
    } catch (const std::exception&) {
      // Tearing down: nothing left to report to.
    }
  }
#endif
}

bool DataParallel::UseNccl(const torch::Device& device) {
#if DICE_HAVE_NCCL
  if (env_.world_size == 1 || !device.is_cuda() || !impl_->store) return false;
  if (impl_->nccl) return true;
  c10::cuda::CUDAGuard guard(device);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = impl_->collective_timeout;
  auto prefix = c10::make_intrusive<c10d::PrefixStore>("dice/nccl/", impl_->store);
  impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefix, env_.rank, env_.world_size, opts);
  impl_->nccl_device = device;
  return true;
#else
  (void)device;
  return false;
#endif
}

Expected<std::unique_ptr<DataParallel>> DataParallel::Join(std::chrono::seconds rendezvous_timeout,
                                                           std::chrono::seconds collective_timeout) {
  auto env = ReadDistributedEnv();
  if (!env.ok()) return env.status();
  std::unique_ptr<DataParallel> dp(new DataParallel(*env));
  dp->impl_->collective_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout);
  if (env->world_size == 1) return Expected<std::unique_ptr<DataParallel>>(std::move(dp));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env->master_port);
  // Under torchrun the elastic agent already hosts a TCPStore at
  // MASTER_ADDR:MASTER_PORT and says so (TORCHELASTIC_USE_AGENT_STORE=True):
  // every rank joins it as a client. Launched by hand, rank 0 hosts it.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent != nullptr && std::string(agent) == "True";
  opts.isServer = !agent_store && env->rank == 0;
  opts.numWorkers = static_cast<size_t>(env->world_size);
  opts.waitWorkers = !agent_store;
  opts.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(rendezvous_timeout);
  const std::string where = env->master_addr + ":" + std::to_string(env->master_port);
  const std::string who = "rank " + std::to_string(env->rank) + " of " + std::to_string(env->world_size);
  try {
    dp->impl_->store = c10::make_intrusive<c10d::TCPStore>(env->master_addr, opts);
    // Every rank checks in; all leave once the count reaches the world size.
    dp->impl_->store->add("dice/joined", 1);
    const auto deadline = std::chrono::steady_clock::now() + rendezvous_timeout;
    while (dp->impl_->store->add("dice/joined", 0) < env->world_size) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("not every rank checked in");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto* ce = dynamic_cast<const c10::Error*>(&e)) what = ce->what_without_backtrace();
    return Status(StatusCode::kTimeout, "data parallel: " + who + ": rendezvous at " + where + " did not complete "
                                        "within " + std::to_string(rendezvous_timeout.count()) +
                                        " s (is rank 0 running, are all WORLD_SIZE ranks started, is the port "
                                        "free?): " + what);
  }
  dp->impl_->store->setTimeout(dp->impl_->collective_timeout);
  return Expected<std::unique_ptr<DataParallel>>(std::move(dp));
}

Status DataParallel::Exchange(const std::vector<uint8_t>& mine, bool from_root_only,
                              std::vector<std::vector<uint8_t>>* all) {
  Impl& im = *impl_;
  const std::string base = "dice/c/" + std::to_string(im.sequence++) + "/";
  std::vector<std::string> keys;
  for (int q = 0; q < env_.world_size; ++q) {
    if (!from_root_only || q == 0) keys.push_back(base + std::to_string(q));
  }
  const std::string who = "data parallel: rank " + std::to_string(env_.rank) + ": collective #" +
                          std::to_string(im.sequence - 1);
  try {
    if (!from_root_only || env_.rank == 0) im.store->set(base + std::to_string(env_.rank), mine);
    const auto deadline = std::chrono::steady_clock::now() + im.collective_timeout;
    while (!im.store->check(keys)) {
      if (im.store->check({kAbortKey})) {
        return Status(StatusCode::kCrashed, who + ": another rank stopped: " + Text(im.store->get(kAbortKey)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (const auto& k : keys) {
          if (!im.store->check({k})) missing += (missing.empty() ? "" : ", ") + k.substr(base.size());
        }
        return Status(StatusCode::kTimeout, who + ": rank(s) " + missing + " did not take part within " +
                                                std::to_string(im.collective_timeout.count() / 1000) +
                                                " s (died or stuck)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    all->clear();
    for (const auto& k : keys) all->push_back(im.store->get(k));
    // The last reader removes the values; the store holds one collective at most.
    if (im.store->add(base + "read", 1) == env_.world_size) {
      for (const auto& k : keys) im.store->deleteKey(k);
      im.store->deleteKey(base + "read");
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto* ce = dynamic_cast<const c10::Error*>(&e)) what = ce->what_without_backtrace();
    return Status(StatusCode::kCrashed, who + ": lost the store at " + env_.master_addr + ":" +
                                            std::to_string(env_.master_port) + " (rank 0 gone?): " + what);
  }
  return Status::Ok();
}

Status DataParallel::AllReduceMeanGradients(const std::vector<torch::Tensor>& params) {
  if (env_.world_size == 1) return Status::Ok();
#if DICE_HAVE_NCCL
  if (impl_->nccl) {
    try {
      std::vector<torch::Tensor> flat;
      for (const auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        flat.push_back(p.grad().detach().to(impl_->nccl_device, torch::kFloat32).reshape({-1}));
      }
      std::vector<at::Tensor> buffer = {torch::cat(flat)};
      impl_->nccl->allreduce(buffer)->wait();
      buffer[0].div_(static_cast<double>(env_.world_size));
      torch::NoGradGuard no_grad;
      int64_t offset = 0;
      for (const auto& p : params) {
        p.mutable_grad().copy_(buffer[0].narrow(0, offset, p.numel()).view(p.sizes()));
        offset += p.numel();
      }
    } catch (const std::exception& e) {
      return Status(StatusCode::kCrashed, "data parallel: rank " + std::to_string(env_.rank) +
                                              ": NCCL all-reduce of the gradients failed (a rank died?): " + e.what());
    }
    return Status::Ok();
  }
#endif
  std::vector<torch::Tensor> flat;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    flat.push_back(p.grad().detach().to(torch::kCPU, torch::kFloat32).reshape({-1}));
  }
  auto mine = torch::cat(flat).contiguous();
  const auto* bytes = reinterpret_cast<const uint8_t*>(mine.data_ptr());
  std::vector<std::vector<uint8_t>> all;
  DICE_RETURN_IF_ERROR(Exchange(std::vector<uint8_t>(bytes, bytes + mine.nbytes()), false, &all));
  auto sum = torch::zeros_like(mine);
  for (size_t q = 0; q < all.size(); ++q) {
    if (all[q].size() != mine.nbytes()) {
      return Status(StatusCode::kInvalidArgument, "data parallel: rank " + std::to_string(q) + " sent " +
                                                      std::to_string(all[q].size()) + " gradient bytes, rank " +
                                                      std::to_string(env_.rank) + " has " +
                                                      std::to_string(mine.nbytes()) + " (different models?)");
    }
    sum += torch::from_blob(all[q].data(), {mine.numel()}, torch::kFloat32);  // rank order: same sum everywhere
  }
  sum /= static_cast<double>(env_.world_size);
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    const int64_t n = p.numel();
    p.mutable_grad().copy_(sum.narrow(0, offset, n).view(p.sizes()));
    offset += n;
  }
  return Status::Ok();
}

Expected<std::vector<double>> DataParallel::AllReduceSum(const std::vector<double>& values) {
  if (env_.world_size == 1) return values;
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  std::vector<std::vector<uint8_t>> all;
  DICE_RETURN_IF_ERROR(Exchange(std::vector<uint8_t>(bytes, bytes + values.size() * sizeof(double)), false, &all));
  std::vector<double> sum(values.size(), 0.0);
  for (const auto& a : all) {
    if (a.size() != values.size() * sizeof(double)) {
      return Status(StatusCode::kInvalidArgument, "data parallel: ranks all-reduce different numbers of values");
    }
    for (size_t i = 0; i < sum.size(); ++i) {
      double v;
      std::memcpy(&v, a.data() + i * sizeof(double), sizeof v);
      sum[i] += v;
    }
  }
  return sum;
}

Status DataParallel::Broadcast(const std::vector<torch::Tensor>& tensors) {
  if (env_.world_size == 1) return Status::Ok();
#if DICE_HAVE_NCCL
  if (impl_->nccl) {
    try {
      torch::NoGradGuard no_grad;
      for (const auto& t : tensors) {
        std::vector<at::Tensor> one = {t.device() == impl_->nccl_device && t.is_contiguous()
                                           ? t.detach()
                                           : t.detach().to(impl_->nccl_device).contiguous()};
        impl_->nccl->broadcast(one)->wait();
        if (!one[0].is_same(t)) t.copy_(one[0]);
      }
    } catch (const std::exception& e) {
      return Status(StatusCode::kCrashed, "data parallel: rank " + std::to_string(env_.rank) +
                                              ": NCCL broadcast failed (a rank died?): " + e.what());
    }
    return Status::Ok();
  }
#endif
  std::vector<uint8_t> mine;
  if (env_.rank == 0) {
    for (const auto& t : tensors) {
      auto c = t.detach().to(torch::kCPU).contiguous();
      const auto* b = reinterpret_cast<const uint8_t*>(c.data_ptr());
      mine.insert(mine.end(), b, b + c.nbytes());
    }
  }
  std::vector<std::vector<uint8_t>> all;
  DICE_RETURN_IF_ERROR(Exchange(mine, true, &all));
  if (env_.rank == 0) return Status::Ok();
  const auto& root = all.at(0);
  size_t offset = 0;
  torch::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (offset + n > root.size()) {
      return Status(StatusCode::kInvalidArgument, "data parallel: rank 0 broadcast fewer bytes than rank " +
                                                      std::to_string(env_.rank) + " expects (different models?)");
    }
    auto src = torch::from_blob(const_cast<uint8_t*>(root.data() + offset), t.sizes(),
                                torch::TensorOptions().dtype(t.dtype()));
    t.copy_(src);
    offset += n;
  }
  return Status::Ok();
}

void DataParallel::Abort(const std::string& reason) {
  if (!impl_->store || impl_->aborted) return;
  impl_->aborted = true;
  try {
    impl_->store->compareSet(kAbortKey, {}, std::vector<uint8_t>(reason.begin(), reason.end()));
  } catch (const std::exception&) {
    // Best effort: the store may already be gone.
  }
}

Status DataParallel::Finish() {
  if (!impl_->store || impl_->finished) return Status::Ok();
  impl_->finished = true;
  try {
    impl_->store->add(kFinishKey, 1);
    if (env_.rank != 0) return Status::Ok();
    const auto deadline = std::chrono::steady_clock::now() + impl_->collective_timeout;
    while (impl_->store->add(kFinishKey, 0) < env_.world_size) {
      if (impl_->store->check({kAbortKey})) return Status::Ok();
      if (std::chrono::steady_clock::now() > deadline) {
        return Status(StatusCode::kTimeout, "data parallel: rank 0: not every rank finished within " +
                                                std::to_string(impl_->collective_timeout.count() / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kCrashed, std::string("data parallel: finishing: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace dice::training
