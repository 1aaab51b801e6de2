// The training module end to end on a tiny random SDAR-architecture model
// (issue 4's CPU "done when"): dataset -> SFT (loss falls) -> RL (one
// stage-1 step, NVRTC-compiled rewards, known-good answers injected) ->
// checkpoint -> the generator loads it and decodes. Also: resume, bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/dataset.h"
#include "dice/training/examples.h"
#include "dice/training/rl.h"
#include "dice/training/sft.h"

namespace dice::training {
namespace {

// Four elementwise tasks in the KernelBench format (pytorch_code, cuda_code,
// prefix/middle/suffix), the middle a device-form CUDA kernel.
struct Op {
  const char* name;
  const char* torch_expr;
  const char* cuda_expr;
};
constexpr Op kOps[] = {{"relu", "torch.relu(x)", "v > 0.f ? v : 0.f"},
                       {"neg", "torch.neg(x)", "-v"},
                       {"square", "torch.square(x)", "v * v"},
                       {"double", "torch.mul(x, 2.0)", "2.f * v"}};

std::string Kernel(const Op& op) {
  return std::string("__global__ void ") + op.name +
         "_kernel(const float* x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) { float v = x[i]; y[i] = " + op.cuda_expr + "; }\n}\n";
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

class TrainingPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/dice_training_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // One intra-op thread: on a 2-core CI machine that is also building,
    // LibTorch's thread pool oversubscribes the cores and runs ~15x slower.
    torch::set_num_threads(1);
    WriteText(Path("templates.json"), R"({"system": "", "infilling": "R:{reference}\nP:{prefix}\nS:{suffix}", )"
                                      R"("end_to_end": "R:{reference}"})");
  }
  // rm -rf: LibTorch's exported std::filesystem::remove_all crashes when interposed.
  static void TearDownTestSuite() { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }
  static std::string Path(const std::string& name) { return dir_ + "/" + name; }
  // SFT of the model in `model` on `data`, checkpoints to `out`; the suite's templates.
  static SftOptions Sft(const std::string& model, const std::string& data, const std::string& out) {
    SftOptions s;
    s.model_dir = Path(model);
    s.data_path = Path(data);
    s.out_dir = Path(out);
    s.templates_path = Path("templates.json");
    return s;
  }
  // RL from the model in `model` on the tasks in `tasks` (also the
  // known-good answers injected), checkpoints to `out`; the suite's templates.
  static RlOptions Rl(const std::string& model, const std::string& tasks, const std::string& out) {
    RlOptions r;
    r.model_dir = Path(model);
    r.tasks_path = Path(tasks);
    r.inject_path = Path(tasks);
    r.out_dir = Path(out);
    r.templates_path = Path("templates.json");
    return r;
  }
  static std::string dir_;
};
std::string TrainingPipeline::dir_;

TEST_F(TrainingPipeline, DatasetSftRlCheckpointDecode) {
  // A tiny SDAR-architecture model with a byte-level tokenizer.
  generator::SdarConfig c = generator::TinySdarConfig(260, 1024, /*tie_word_embeddings=*/true, /*hidden_size=*/64);
  ASSERT_TRUE(InitRandomCheckpoint(c, Path("init"), 7).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("init")).ok());

  // 1. dataset: a KernelBench-format corpus with one malformed item and one duplicate.
  std::string corpus;
  for (const Op& op : kOps) {
    nlohmann::json j = {{"id", op.name},
                        {"pytorch_code", std::string("def forward(self, x):\n    return ") + op.torch_expr + "\n"},
                        {"cuda_code", "source = \"\"\"\n" + Kernel(op) + "\"\"\"\n"},
                        {"prefix", ""},
                        {"middle", Kernel(op)},
                        {"suffix", "y = k(x)"},
                        {"level", 1}};
    corpus += j.dump() + "\n";
  }
  corpus += "{\"id\": \"broken\", \"pytorch_code\": 3}\n";
  nlohmann::json dup = {{"id", "relu-again"}, {"pytorch_code", "def forward(self, x):\n    return torch.relu(x)\n"},
                        {"cuda_code", "source = \"\"\"\n" + Kernel(kOps[0]) + "\"\"\"\n"}, {"level", 1}};
  corpus += dup.dump() + "\n";
  // The end-to-end task set's shape: "idx", a string level, no solution.
  corpus += R"({"idx": "9", "level": "2", "pytorch_code": "def forward(self, x):\n    return x\n", "cuda_code": ""})"
            "\n";
  WriteText(Path("corpus.jsonl"), corpus);
  DatasetOptions d;
  d.corpora = {Path("corpus.jsonl")};
  d.out_path = Path("cuke.jsonl");
  d.heldout_percent = 0;  // the tiny set is all training data here
  d.validation_percent = 0;
  std::vector<std::string> dataset_log;
  auto ds = BuildDataset(d, [&](const std::string& l) { dataset_log.push_back(l); });
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->read, 7);
  EXPECT_EQ(ds->malformed, 1);
  bool named = false;  // the malformed item is named with its reason
  for (const auto& l : dataset_log) {
    named |= l.find("item 5 \"broken\" is malformed: \"pytorch_code\" is missing or not a string") != std::string::npos;
  }
  EXPECT_TRUE(named) << "no log line names the malformed item";
  EXPECT_EQ(ds->no_answer, 1);
  EXPECT_EQ(ds->duplicates, 1);  // relu-again's program equals relu's
  EXPECT_EQ(ds->infill, 4);
  EXPECT_EQ(ds->e2e, 4);
  std::vector<std::string> skipped;
  auto examples = ReadExamples(Path("cuke.jsonl"), &skipped);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(examples->size(), 8u);
  EXPECT_EQ(examples->front().verified, "unverified-here");
  EXPECT_EQ(examples->front().difficulty, "single_op");
  // --keep-tasks: the answer-less item becomes a stage-2 RL task (level from the file).
  d.keep_tasks = true;
  d.out_path = Path("with_tasks.jsonl");
  auto with_tasks = BuildDataset(d, nullptr);
  ASSERT_TRUE(with_tasks.ok()) << with_tasks.status().ToString();
  EXPECT_EQ(with_tasks->task, 1);
  auto tasks = ReadExamples(Path("with_tasks.jsonl"), &skipped);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  EXPECT_EQ(tasks->back().kind, "task");
  EXPECT_EQ(tasks->back().level, 2);
  // Infill-only SFT/RL set: the four kernels.
  std::string infill;
  for (const auto& e : *examples) {
    if (e.kind == "infill") infill += e.ToJsonLine() + "\n";
  }
  WriteText(Path("infill.jsonl"), infill);

  // 2. SFT: the loss falls over 50 steps on the fixed tiny set.
  SftOptions s = Sft("init", "infill.jsonl", "sft");
  s.steps = 50;
  s.batch_size = 4;
  s.warmup_steps = 5;
  s.lr = 3e-3;
  s.seed = 1;
  auto sft = RunSft(s, nullptr);
  ASSERT_TRUE(sft.ok()) << sft.status().ToString();
  ASSERT_EQ(sft->losses.size(), 50u);
  const double first = std::accumulate(sft->losses.begin(), sft->losses.begin() + 10, 0.0) / 10;
  const double last = std::accumulate(sft->losses.end() - 10, sft->losses.end(), 0.0) / 10;
  EXPECT_LT(last, 0.8 * first) << "first-10 mean " << first << ", last-10 mean " << last;
  std::printf("sft: first-10 mean loss %.4f, last-10 mean loss %.4f, %.0f tokens/s\n", first, last, sft->tokens_per_s);

  // 3. RL: one stage-1 step; random rollouts earn nothing, the injected
  // known-good answer compiles with NVRTC (sm_90), so the group has signal.
  RlOptions r = Rl("sft", "infill.jsonl", "rl");
  r.stage = "infill";
  r.steps = 1;
  r.group_size = 4;
  r.max_new_tokens = 48;
  r.max_trace_tokens = 64;  // the update runs on chunked traces (PackTraceChunks)
  r.lr = 1e-3;
  auto rl = RunRl(r, nullptr);
  ASSERT_TRUE(rl.ok()) << rl.status().ToString();
  ASSERT_EQ(rl->steps.size(), 1u);
  const RlStepReport& st = rl->steps[0];
  EXPECT_EQ(st.rollouts, 4);
  EXPECT_EQ(st.injected, 1);
  EXPECT_GE(st.compiled, 1);  // the known-good kernel really compiled
  EXPECT_EQ(st.level, 1);
  EXPECT_EQ(st.groups_used, 1) << "no advantage signal: " << st.compiled << " of 4 compiled";
  EXPECT_GT(st.scored_tokens, 0);
  EXPECT_GT(rl->parameter_change, 0.0);
  EXPECT_NE(rl->correctness_note.find("correctness not checked"), std::string::npos);
  std::printf("rl: reward %.3f, compiled %lld/4, loss %.5f, parameter change %.4g; %s\n", st.mean_reward,
              static_cast<long long>(st.compiled), st.loss, rl->parameter_change, rl->correctness_note.c_str());

  // 4. The generator loads the RL checkpoint and decodes; its weights differ from SFT's.
  auto model = generator::SdarModel::Load(Path("rl"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto before = generator::SdarModel::Load(Path("sft"));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  auto w1 = model->NamedWeights(), w0 = before->NamedWeights();
  double diff = 0;
  for (size_t i = 0; i < w1.size(); ++i) diff += (w1[i].second - w0[i].second).abs().sum().item<double>();
  EXPECT_GT(diff, 0.0);
  auto tok = generator::Tokenizer::Load(Path("rl"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  generator::DecodeOptions o;
  o.max_new_tokens = 16;
  o.eos_ids = {};
  auto out = generator::Decode(*model, tok->Encode("R:torch.relu(x)"), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->tokens[0].size(), 16u);
}

// Stage 2 with the judged reward (compiles AND correct): end-to-end tasks
// whose reference programs and known-good answers are pure PyTorch, so the
// KernelBench protocol runs on the CPU. The injected correct answer earns 1,
// an injected wrong one 0 with the verdict logged, the random rollouts (no
// code block) 0.
TEST_F(TrainingPipeline, RlJudgedRewardRunsTheKernelBenchProtocol) {
  ASSERT_TRUE(InitRandomCheckpoint(generator::TinySdarConfig(260, 2048, /*tie_word_embeddings=*/true),
                                   Path("judge_init"), 3)
                  .ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("judge_init")).ok());
  const std::string reference =
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
      "        return torch.tanh(x) * 3.0\n\ndef get_inputs():\n    return [torch.randn(16, 64)]\n\n"
      "def get_init_inputs():\n    return []\n";
  auto model_new = [](const std::string& expr) {
    return "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
           "        return " + expr + "\n";
  };
  std::string tasks, answers;
  for (const auto& [id, answer] : {std::pair<std::string, std::string>{"right", model_new("3.0 * torch.tanh(x)")},
                                   {"wrong", model_new("torch.tanh(x)")}}) {
    CukeExample e;
    e.id = id;
    e.kind = "e2e";
    e.reference = reference;
    e.program = answer;
    e.split = "train";
    tasks += e.ToJsonLine() + "\n";
  }
  WriteText(Path("judge_tasks.jsonl"), tasks);
  RlOptions r = Rl("judge_init", "judge_tasks.jsonl", "judge_rl");
  r.stage = "e2e";
  r.reward = "judge";
  r.steps = 1;
  r.tasks_per_step = 2;
  r.group_size = 2;
  r.max_new_tokens = 8;
  r.lr = 1e-3;
  std::vector<std::string> lines;
  auto rl = RunRl(r, [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(rl.ok()) << rl.status().ToString();
  ASSERT_EQ(rl->steps.size(), 1u);
  const RlStepReport& st = rl->steps[0];
  EXPECT_EQ(st.rollouts, 4);
  EXPECT_EQ(st.injected, 2);
  EXPECT_EQ(st.compiled, 2);               // both injected programs imported
  EXPECT_DOUBLE_EQ(st.mean_reward, 0.25);  // only the right one is correct
  EXPECT_EQ(st.groups_used, 1);            // "wrong"'s group has equal rewards: dropped
  EXPECT_EQ(st.groups_dropped, 1);
  EXPECT_TRUE(rl->correctness_note.empty()) << rl->correctness_note;
  bool logged = false;
  for (const auto& l : lines) logged |= l.find("known-good answer of wrong earns no reward: incorrect") != std::string::npos;
  EXPECT_TRUE(logged) << "the wrong answer's verdict is not in the log";
  bool rollout_logged = false;  // a decoded rollout that earns nothing says why
  for (const auto& l : lines) rollout_logged |= l.find(": rollout 0 earns nothing: ") != std::string::npos;
  EXPECT_TRUE(rollout_logged) << "no log line says why a rollout earned nothing";
  // Each group's line counts its own (decoded) rollouts only: 1 of G = 2 here,
  // 8 random tokens that cannot be a correct program.
  for (const std::string id : {"right", "wrong"}) {
    bool group_logged = false;
    for (const auto& l : lines) group_logged |= l.find("rl: step 1 " + id + " (level ") != std::string::npos &&
                                                l.find("): policy rewarded 0/1, compiled ") != std::string::npos;
    EXPECT_TRUE(group_logged) << "no per-task line for " << id;
  }

  r.reward = "sometimes";
  auto bad = RunRl(r, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--reward must be auto, judge or compile"), std::string::npos);
  r.reward = "judge";
  r.judge_jobs = 0;
  EXPECT_EQ(RunRl(r, nullptr).status().code(), StatusCode::kInvalidArgument);
  r.judge_jobs = 2;
  r.max_trace_tokens = -1;
  auto bad_cap = RunRl(r, nullptr);
  ASSERT_FALSE(bad_cap.ok());
  EXPECT_EQ(bad_cap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_cap.status().message().find("--max-trace-tokens"), std::string::npos) << bad_cap.status().ToString();
  r.max_trace_tokens = 0;
  r.inner_epochs = 0;  // gpu_train_eval.sh's RL_INNER_EPOCHS
  auto bad_epochs = RunRl(r, nullptr);
  ASSERT_FALSE(bad_epochs.ok());
  EXPECT_EQ(bad_epochs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_epochs.status().message().find("--inner-epochs must be >= 1"), std::string::npos)
      << bad_epochs.status().ToString();
  r.inner_epochs = 1;
  r.group_size = 1;  // gpu_train_eval.sh's RL_GROUP: one rollout has no group to normalise over
  auto bad_group = RunRl(r, nullptr);
  ASSERT_FALSE(bad_group.ok());
  EXPECT_EQ(bad_group.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_group.status().message().find("--group-size must be >= 2"), std::string::npos)
      << bad_group.status().ToString();
}

// A known-good answer that cannot fit the model's context beside its prompt
// (seen on the H200: a 7.5 KB infilling middle against a byte-level model's
// 8192 positions) is not injected: the step logs why and goes on, where the
// trajectory loss used to stop the run with "position ... outside the
// context".
TEST_F(TrainingPipeline, RlSkipsAKnownGoodAnswerLongerThanTheContext) {
  ASSERT_TRUE(InitRandomCheckpoint(generator::TinySdarConfig(260, 128, /*tie_word_embeddings=*/true),
                                   Path("short_init"), 5)
                  .ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("short_init")).ok());
  CukeExample e;
  e.id = "long";
  e.kind = "e2e";
  e.reference = "torch.relu(x)";
  e.program = std::string(300, 'x');  // 300 byte tokens > the 128-position context
  e.split = "train";
  WriteText(Path("long_tasks.jsonl"), e.ToJsonLine() + "\n");
  RlOptions r = Rl("short_init", "long_tasks.jsonl", "long_rl");
  r.stage = "e2e";
  r.reward = "compile";
  r.steps = 1;
  r.tasks_per_step = 1;
  r.group_size = 2;
  r.max_new_tokens = 8;
  std::vector<std::string> lines;
  auto rl = RunRl(r, [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(rl.ok()) << rl.status().ToString();
  ASSERT_EQ(rl->steps.size(), 1u);
  EXPECT_EQ(rl->steps[0].injected, 0);
  bool logged = false;
  for (const auto& l : lines) {
    logged |= l.find("known-good answer of long not injected") != std::string::npos &&
              l.find("exceed the context (128)") != std::string::npos;
  }
  EXPECT_TRUE(logged) << "no log line says why the answer was not injected";
}

// The builder re-verifies and times imported pairs (--verify judge), here
// on the CPU with pure-PyTorch programs: a correct pair is kept with the
// measured speedup, a wrong one and a crashing one are dropped and counted,
// and --min-speedup applies to the measured speedup.
TEST_F(TrainingPipeline, DatasetJudgesImportedPairsAndFiltersByMeasuredSpeedup) {
  const std::string reference =
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x) + 1.0\n\ndef get_inputs():\n    return [torch.randn(64, 256)]\n\n"
      "def get_init_inputs():\n    return []\n";
  auto program = [](const std::string& body) {
    return "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" +
           body + "\n";
  };
  std::string corpus;
  for (const auto& [id, prog] :
       {std::pair<std::string, std::string>{"good", program("        return torch.clamp_min(x, 0.0) + 1.0")},
        {"wrong", program("        return torch.relu(x)")},
        {"crash", program("        import os\n        os.abort()")}}) {
    corpus += nlohmann::json({{"id", id}, {"pytorch_code", reference}, {"cuda_code", prog}, {"level", 1}}).dump() + "\n";
  }
  WriteText(Path("judge_corpus.jsonl"), corpus);
  DatasetOptions d;
  d.corpora = {Path("judge_corpus.jsonl")};
  d.out_path = Path("judged.jsonl");
  d.heldout_percent = 0;
  d.validation_percent = 0;
  d.verify = "judge";
  d.verify_device = "cpu";
  d.verify_jobs = 3;
  d.min_speedup = 0.0;
  std::vector<std::string> lines;
  auto ds = BuildDataset(d, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->read, 3);
  EXPECT_EQ(ds->verified, 1);
  EXPECT_EQ(ds->failed_verification, 2);
  EXPECT_EQ(ds->written, 1);
  std::string log;
  for (const auto& l : lines) log += l + "\n";
  EXPECT_NE(log.find("corpus:wrong (e2e) fails verification: incorrect"), std::string::npos) << log;
  EXPECT_NE(log.find("corpus:crash (e2e) fails verification: crashed"), std::string::npos) << log;
  std::vector<std::string> skipped;
  auto kept = ReadExamples(Path("judged.jsonl"), &skipped);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ(kept->front().id, "corpus:good");
  EXPECT_EQ(kept->front().verified, "judge:cpu");
  ASSERT_TRUE(kept->front().speedup.has_value());
  EXPECT_GT(*kept->front().speedup, 0.0);

  // The same pair against a speedup it cannot reach: measured, then dropped.
  d.min_speedup = 1000.0;
  d.out_path = Path("judged_fast_only.jsonl");
  d.corpora = {Path("judge_corpus.jsonl")};
  auto fast_only = BuildDataset(d, nullptr);
  ASSERT_TRUE(fast_only.ok()) << fast_only.status().ToString();
  EXPECT_EQ(fast_only->verified, 1);
  EXPECT_EQ(fast_only->below_speedup, 1);
  EXPECT_EQ(fast_only->written, 0);

  d.verify = "sometimes";
  EXPECT_EQ(BuildDataset(d, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TrainingPipeline, SftResumesFromItsCheckpoint) {
  generator::SdarConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 64;
  c.vocab_size = 260;
  c.mask_token_id = 259;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  ASSERT_TRUE(InitRandomCheckpoint(c, Path("small"), 3).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("small")).ok());
  CukeExample e;
  e.id = "t";
  e.kind = "infill";
  e.reference = "torch.relu(x)";
  e.middle = Kernel(kOps[0]);
  e.suffix = "y";
  WriteText(Path("one.jsonl"), e.ToJsonLine() + "\nnot json\n");
  SftOptions s = Sft("small", "one.jsonl", "sft_a");
  s.steps = 6;
  s.save_every = 3;
  s.batch_size = 1;
  s.max_length = 256;
  auto a = RunSft(s, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->skipped_lines, 1);  // "not json" is reported, not fatal
  s.resume_dir = Path("sft_a");
  s.out_dir = Path("sft_b");
  s.steps = 9;
  auto b = RunSft(s, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->first_step, 6);
  EXPECT_EQ(b->losses.size(), 3u);
  // Bad input: a missing checkpoint, and a resume directory without state.
  s.resume_dir = "";
  s.model_dir = Path("no_such_model");
  auto missing = RunSft(s, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_model"), std::string::npos) << missing.status().ToString();
  s.model_dir = Path("small");
  s.resume_dir = Path("small");
  auto no_state = RunSft(s, nullptr);
  ASSERT_FALSE(no_state.ok());
  EXPECT_NE(no_state.status().message().find("trainer_state.json"), std::string::npos) << no_state.status().ToString();
}

TEST_F(TrainingPipeline, DecodingAMemorisedExampleReproducesItsAnswer) {
  // SFT and decoding must agree on the layout (prompt blocks, block-causal
  // attention, the masked block): a model trained until it knows one
  // example by heart then decodes that example's prompt into its answer.
  // (A mismatch shows as fluent-looking bytes that never compile.)
  generator::SdarConfig c = generator::TinySdarConfig(260, 512, /*tie_word_embeddings=*/true);
  c.hidden_size = 64;  // twice the tiny width: learns one example in 300 steps
  c.head_dim = 16;
  c.intermediate_size = 128;
  ASSERT_TRUE(InitRandomCheckpoint(c, Path("memo_init"), 5).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("memo_init")).ok());
  CukeExample e;
  e.id = "memo";
  e.kind = "infill";
  e.reference = "torch.neg(x)";
  e.prefix = "__global__ void k(const float* x, float* y, int n) {\n";
  e.middle = "  int i = threadIdx.x;\n  if (i < n) y[i] = -x[i];\n";
  e.suffix = "}\n";
  WriteText(Path("memo.jsonl"), e.ToJsonLine() + "\n");
  SftOptions s = Sft("memo_init", "memo.jsonl", "memo_sft");
  s.steps = 300;
  s.batch_size = 4;
  s.warmup_steps = 10;
  s.lr = 3e-3;
  s.max_length = 512;
  auto sft = RunSft(s, nullptr);
  ASSERT_TRUE(sft.ok()) << sft.status().ToString();
  const double last = std::accumulate(sft->losses.end() - 10, sft->losses.end(), 0.0) / 10;
  std::printf("memorise: last-10 mean loss %.4f\n", last);
  auto model = generator::SdarModel::Load(Path("memo_sft"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = generator::Tokenizer::Load(Path("memo_sft"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  generator::PromptTemplates t;
  t.system = "";
  t.infilling = "R:{reference}\nP:{prefix}\nS:{suffix}";
  t.end_to_end = "R:{reference}";
  auto pa = ExamplePromptAndAnswer(e, t);
  ASSERT_TRUE(pa.ok()) << pa.status().ToString();
  generator::DecodeOptions o;
  o.max_new_tokens = static_cast<int64_t>(pa->answer.size()) + 8;
  o.eos_ids = {};
  auto out = generator::Decode(*model, tok->Encode(pa->prompt), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::string got = tok->Decode(out->tokens[0]);
  std::printf("memorise: want [%s]\n          got  [%s]\n", pa->answer.c_str(), got.c_str());
  EXPECT_EQ(got.substr(0, pa->answer.size()), pa->answer);
}

TEST_F(TrainingPipeline, RlResumesFromItsCheckpointAsOneRun) {
  // 1 step, then --resume for the second, ends with the weights of one
  // uninterrupted 2-step run (same seeds, task order and AdamW state); the
  // CSV holds both steps. Bad input: adaptive schedule, a checkpoint already
  // at --steps, another architecture, a directory without trainer state.
  const generator::SdarConfig c = generator::TinySdarConfig(260, 512, /*tie_word_embeddings=*/true);
  ASSERT_TRUE(InitRandomCheckpoint(c, Path("rl_init"), 4).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("rl_init")).ok());
  std::string lines;
  for (int i = 0; i < 2; ++i) {
    CukeExample e;
    e.id = kOps[i].name;
    e.kind = "infill";
    e.reference = kOps[i].torch_expr;
    e.middle = Kernel(kOps[i]);
    e.suffix = "y = k(x)";
    e.split = "train";
    lines += e.ToJsonLine() + "\n";
  }
  WriteText(Path("rl_tasks.jsonl"), lines);
  RlOptions r = Rl("rl_init", "rl_tasks.jsonl", "rl_whole");
  r.reward = "compile";
  r.group_size = 4;
  r.max_new_tokens = 16;
  r.save_every = 1;
  r.lr = 1e-3;
  r.steps = 2;
  auto whole = RunRl(r, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->steps.size(), 2u);
  EXPECT_GE(whole->steps[1].groups_used, 1) << "step 2 updated nothing: the comparison would be vacuous";
  r.steps = 1;
  r.out_dir = Path("rl_part");
  auto part = RunRl(r, nullptr);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_NE(part->parameter_digest, whole->parameter_digest);  // step 2 changes the weights
  r.steps = 2;
  r.resume_dir = Path("rl_part");
  auto resumed = RunRl(r, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->first_step, 1);
  ASSERT_EQ(resumed->steps.size(), 1u);
  EXPECT_EQ(resumed->steps[0].step, 2);
  EXPECT_EQ(resumed->steps[0].level, whole->steps[1].level);
  EXPECT_EQ(resumed->parameter_digest, whole->parameter_digest) << "1 + 1 resumed steps differ from 2 steps";
  std::ifstream csv(Path("rl_part") + "/rl_log.csv");
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(csv, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u) << "header + steps 1 and 2";
  EXPECT_EQ(rows[1].substr(0, 2), "1,");
  EXPECT_EQ(rows[2].substr(0, 2), "2,");
  // Resumed into another --out: a new CSV with its own header.
  r.steps = 3;
  r.resume_dir = Path("rl_part");
  r.out_dir = Path("rl_next");
  ASSERT_TRUE(RunRl(r, nullptr).ok());
  std::ifstream next_csv(Path("rl_next") + "/rl_log.csv");
  rows.clear();
  while (std::getline(next_csv, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 2u) << "header + step 3";
  EXPECT_EQ(rows[0].substr(0, 5), "step,");
  EXPECT_EQ(rows[1].substr(0, 2), "3,");

  r.out_dir = Path("rl_bad");
  r.schedule = "adaptive";
  auto adaptive = RunRl(r, nullptr);
  ASSERT_FALSE(adaptive.ok());
  EXPECT_NE(adaptive.status().message().find("--schedule ordered"), std::string::npos) << adaptive.status().ToString();
  r.schedule = "ordered";
  r.steps = 2;
  r.resume_dir = Path("rl_whole");  // saved at step 2 = --steps
  auto done = RunRl(r, nullptr);
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("was saved at step 2"), std::string::npos) << done.status().ToString();
  generator::SdarConfig wide = c;
  wide.hidden_size = 64;
  ASSERT_TRUE(InitRandomCheckpoint(wide, Path("rl_wide"), 4).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("rl_wide")).ok());
  r.steps = 3;
  r.resume_dir = Path("rl_wide");
  auto other = RunRl(r, nullptr);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("architecture"), std::string::npos) << other.status().ToString();
  r.resume_dir = Path("rl_init");  // a model, but no RL trainer state
  auto no_state = RunRl(r, nullptr);
  ASSERT_FALSE(no_state.ok());
  EXPECT_NE(no_state.status().message().find("trainer_state.json"), std::string::npos) << no_state.status().ToString();
}

TEST_F(TrainingPipeline, HeldOutTasksAreNeverTrainedOn) {
  // The split is a function of the task hash, fixed when the dataset is
  // built: with every task held out, SFT has nothing to train on.
  nlohmann::json item = {{"id", "h"}, {"pytorch_code", "def forward(self, x):\n    return torch.relu(x)\n"},
                         {"cuda_code", Kernel(kOps[0])}, {"middle", Kernel(kOps[0])}, {"suffix", "y"}};
  WriteText(Path("held.json"), "[" + item.dump() + "]");
  DatasetOptions d;
  d.corpora = {Path("held.json")};
  d.out_path = Path("held.jsonl");
  d.heldout_percent = 100;
  d.validation_percent = 0;
  auto ds = BuildDataset(d, nullptr);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->heldout, ds->written);
  d.out_path = Path("held_again.jsonl");
  ASSERT_TRUE(BuildDataset(d, nullptr).ok());
  std::vector<std::string> skipped;
  auto a = ReadExamples(Path("held.jsonl"), &skipped), b = ReadExamples(Path("held_again.jsonl"), &skipped);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->front().task_hash, b->front().task_hash);  // the same task, the same split key
  generator::SdarConfig c;  // a model of its own: ctest runs each test in a fresh process and directory
  c.hidden_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.intermediate_size = 32;
  c.vocab_size = 260;
  c.mask_token_id = 259;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  ASSERT_TRUE(InitRandomCheckpoint(c, Path("held_model"), 5).ok());
  ASSERT_TRUE(WriteByteTokenizer(Path("held_model")).ok());
  SftOptions s = Sft("held_model", "held.jsonl", "sft_held");
  s.steps = 1;
  auto sft = RunSft(s, nullptr);
  ASSERT_FALSE(sft.ok());
  EXPECT_NE(sft.status().message().find("no usable training example"), std::string::npos) << sft.status().ToString();
}

TEST(TrainingExamples, MalformedLinesNameFileAndLine) {
  auto e = CukeExample::FromJsonLine("{\"id\": \"x\", \"kind\": \"infill\", \"reference\": \"r\"}", "f.jsonl:3");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(e.status().message().find("f.jsonl:3"), std::string::npos);
  EXPECT_NE(e.status().message().find("middle"), std::string::npos);
  auto bad_level = CukeExample::FromJsonLine(
      "{\"id\": \"x\", \"kind\": \"e2e\", \"reference\": \"r\", \"program\": \"p\", \"level\": 7}", "f.jsonl:4");
  ASSERT_FALSE(bad_level.ok());
  EXPECT_NE(bad_level.status().message().find("level 7"), std::string::npos);
  // device_infill: a middle is required and the preamble must be a string.
  auto no_middle = CukeExample::FromJsonLine(
      "{\"id\": \"x@4\", \"kind\": \"device_infill\", \"reference\": \"r\"}", "f.jsonl:5");
  ASSERT_FALSE(no_middle.ok());
  EXPECT_NE(no_middle.status().message().find("middle"), std::string::npos) << no_middle.status().ToString();
  auto bad_preamble = CukeExample::FromJsonLine(
      "{\"id\": \"x@4\", \"kind\": \"device_infill\", \"reference\": \"r\", \"middle\": \"m\", "
      "\"preamble\": 3}", "f.jsonl:6");
  ASSERT_FALSE(bad_preamble.ok());
  EXPECT_EQ(bad_preamble.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad_preamble.status().message().find("preamble"), std::string::npos) << bad_preamble.status().ToString();
}

TEST(TrainingExamples, DeviceFormKeepsKernelsAndDropsTorchHostCode) {
  const std::string program =
      "import torch\nsource = \"\"\"\n#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
      "__device__ float sq(float v) { return v * v; }\n"
      "__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = sq(x[i]); }\n"
      "torch::Tensor k_cuda(torch::Tensor x) { auto y = torch::empty_like(x); return y; }\n\"\"\"\n";
  auto c = DeviceFormCandidate(program, "t");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->source.find("torch::"), std::string::npos);
  EXPECT_NE(c->source.find("extern \"C\" __global__ void k("), std::string::npos);
  EXPECT_NE(c->source.find("__device__ float sq"), std::string::npos);
  ASSERT_EQ(c->plan.launches.size(), 1u);
  EXPECT_EQ(c->plan.launches[0].kernel, "k");
  EXPECT_FALSE(DeviceFormCandidate("int main() { return 0; }", "t").ok());
}

TEST(TrainingSchedule, OrderedTakesLevelsInOrderAndAdaptiveAdvances) {
  TaskSchedule ordered({3, 1, 2, 1}, TaskSchedule::Mode::kOrdered, 2);
  EXPECT_EQ(ordered.Next(), (std::vector<size_t>{1, 3}));  // level 1 first
  EXPECT_EQ(ordered.Next(), (std::vector<size_t>{2, 0}));  // then 2, then 3
  TaskSchedule adaptive({1, 1, 2, 3}, TaskSchedule::Mode::kAdaptive, 1, 0.5, 4);
  EXPECT_EQ(adaptive.current_level(), 1);
  adaptive.Report({0, 0, 0, 1});  // 25% < 50%: stay
  EXPECT_EQ(adaptive.current_level(), 1);
  EXPECT_EQ(adaptive.Next(), (std::vector<size_t>{0}));
  adaptive.Report({1, 1, 1, 1});  // the running rate passes 0.5: advance
  EXPECT_EQ(adaptive.current_level(), 2);
  EXPECT_EQ(adaptive.Next(), (std::vector<size_t>{2}));
}

TEST(TrainingSchedule, SchedulerLrWarmsUpThenDecays) {
  EXPECT_DOUBLE_EQ(ScheduledLr(1, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLr(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(ScheduledLr(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_LT(ScheduledLr(60, 100, 10, 1.0, 0.1), ScheduledLr(30, 100, 10, 1.0, 0.1));
}

}  // namespace
}  // namespace dice::training
