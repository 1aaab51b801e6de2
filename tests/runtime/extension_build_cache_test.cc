// The extension build cache (CompileExtensionCached, extension_compiler.h;
// issue 18 item 1): a miss builds and stores <dir>/<key>.so + sidecar, a hit
// copies the same bytes without running nvcc, a truncated cached library is
// detected, removed and rebuilt, DICE_BUILD_CACHE=off builds every time, an
// unwritable directory builds uncached, the key follows the source, the
// flags and the toolchain's contents (not its paths), the directory follows
// $DICE_BUILD_CACHE, else the winners' cache directory rule
// (cache::DefaultCacheDir: $DICE_CACHE_DIR, $HOME), and concurrent misses
// leave one complete entry. nvcc is a stand-in script that
// writes a fixed library and counts its runs (the one real CUTLASS build and
// its cache hit are in tests/generator/gemm_template_test.cc). Also
// PrebuildExtensions (prebuild.h): distinct sources built once, in parallel,
// into the same cache the tunes read.
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/prebuild.h"

namespace dice::runtime {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Names in `dir` ending in `suffix` ("" for all but . and ..).
std::vector<std::string> Entries(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// A scratch directory with a stand-in nvcc (writes "fake library" to the
// path after -o and appends a line to calls.log) and a stand-in LibTorch
// include dir; removes itself.
class BuildCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dice-build-cache-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::mkdir((root_ + "/inc").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/inc/torch").c_str(), 0755), 0);
    WriteAll(root_ + "/inc/torch/types.h", "// stand-in\n");
    nvcc_ = root_ + "/nvcc";
    WriteNvcc(nvcc_, "stand-in nvcc, release 0.0");
    ::unsetenv("DICE_BUILD_CACHE");
  }

  // A stand-in nvcc at `path`: `--version` prints `release` (not counted as
  // a run); any other call appends a line to <root_>/calls.log, its
  // arguments to <root_>/args.log, and writes "fake library" to the path
  // after -o.
  void WriteNvcc(const std::string& path, const std::string& release) const {
    WriteAll(path,
             "#!/bin/sh\n"
             "if [ \"$1\" = --version ]; then echo '" + release + "'; exit 0; fi\n"
             "echo run >> '" + root_ + "/calls.log'\n"
             "echo \"$@\" >> '" + root_ + "/args.log'\n"
             "while [ $# -gt 0 ]; do\n"
             "  if [ \"$1\" = -o ]; then printf 'fake library for the build cache test\\n' > \"$2\"; fi\n"
             "  shift\n"
             "done\n");
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  void TearDown() override {
    ::unsetenv("DICE_BUILD_CACHE");
    ASSERT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0);
  }

  ExtensionCompileOptions Options(const std::string& cache_dir) const {
    ExtensionCompileOptions o;
    o.nvcc = nvcc_;
    o.include_dirs = {root_ + "/inc"};
    o.torch_lib_dir = root_ + "/no-lib";
    o.temp_root = root_;
    o.build_cache_dir = cache_dir;
    return o;
  }

  static Candidate Source(const std::string& body = "return in0;") {
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = "test:build-cache";
    c.source = "torch::Tensor dice_forward(torch::Tensor in0) { " + body + " }\n";
    return c;
  }

  // Runs of the stand-in nvcc so far.
  int Calls() const {
    const std::string log = ReadAll(root_ + "/calls.log");
    int n = 0;
    for (char ch : log) n += ch == '\n';
    return n;
  }

  std::unique_ptr<ExtensionBuild> Build(const Candidate& c, const ExtensionCompileOptions& o) {
    auto b = CompileExtensionCached(c, "sm_90", 1, o);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  std::string root_, nvcc_;
};

TEST_F(BuildCacheTest, MissBuildsAndStoresThenHitCopiesTheSameBytesWithoutNvcc) {
  const std::string dir = root_ + "/cache/builds";  // created on the first store
  auto first = Build(Source(), Options(dir));
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->from_cache());
  EXPECT_EQ(Calls(), 1);
  const auto libs = Entries(dir, ".so");
  ASSERT_EQ(libs.size(), 1u);
  EXPECT_EQ(libs[0].size(), 64u + 3u);  // <sha256 hex>.so
  const std::string meta = ReadAll(dir + "/" + libs[0] + ".meta");
  EXPECT_EQ(meta.rfind("size 38\nsha256 ", 0), 0u) << meta;
  auto second = Build(Source(), Options(dir));
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(second->from_cache());
  EXPECT_EQ(Calls(), 1);
  EXPECT_NE(second->library_path(), first->library_path());
  EXPECT_EQ(ReadAll(second->library_path()), ReadAll(first->library_path()));
  EXPECT_LT(second->compile_ms(), 1000.0);
  EXPECT_EQ(Entries(dir, "").size(), 2u);  // the library and its sidecar, no temporaries left
}

TEST_F(BuildCacheTest, ExtensionBuildCachedTellsAHitBeforeAnyNvccRun) {
  // The compile-only tuner asks this before an nvcc build it may not have
  // the budget for (tuner.h kMinUncachedNvccBudgetS).
  const std::string dir = root_ + "/cache/builds";
  EXPECT_FALSE(ExtensionBuildCached(Source(), "sm_90", 1, Options(dir)));
  ASSERT_NE(Build(Source(), Options(dir)), nullptr);
  EXPECT_TRUE(ExtensionBuildCached(Source(), "sm_90", 1, Options(dir)));
  EXPECT_FALSE(ExtensionBuildCached(Source(), "sm_90", 2, Options(dir)));  // another entry point: another key
  EXPECT_FALSE(ExtensionBuildCached(Source(), "sm_90", 1, Options("off")));
  EXPECT_EQ(Calls(), 1);  // asking never runs nvcc
}

TEST_F(BuildCacheTest, TruncatedCachedLibraryIsDetectedRemovedAndRebuilt) {
  const std::string dir = root_ + "/cache";
  ASSERT_NE(Build(Source(), Options(dir)), nullptr);
  const auto libs = Entries(dir, ".so");
  ASSERT_EQ(libs.size(), 1u);
  const std::string lib = dir + "/" + libs[0];
  const std::string good = ReadAll(lib);
  ASSERT_EQ(::truncate(lib.c_str(), 5), 0);
  auto rebuilt = Build(Source(), Options(dir));
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_FALSE(rebuilt->from_cache());
  EXPECT_EQ(Calls(), 2);
  EXPECT_EQ(ReadAll(lib), good);
  EXPECT_EQ(ReadAll(rebuilt->library_path()), good);
  auto hit = Build(Source(), Options(dir));
  ASSERT_NE(hit, nullptr);
  EXPECT_TRUE(hit->from_cache());
  EXPECT_EQ(Calls(), 2);
}

TEST_F(BuildCacheTest, BuildCacheOffInTheEnvironmentBuildsEveryTime) {
  const std::string dir = root_ + "/cache";
  ::setenv("DICE_BUILD_CACHE", "off", 1);
  for (int i = 0; i < 2; ++i) {
    auto b = Build(Source(), Options(dir));
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->from_cache());
  }
  EXPECT_EQ(Calls(), 2);
  EXPECT_TRUE(Entries(dir, "").empty());
  ::unsetenv("DICE_BUILD_CACHE");
  auto off = Build(Source(), Options("off"));  // the option's own "off"
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(Calls(), 3);
  EXPECT_TRUE(Entries(dir, "").empty());
}

TEST_F(BuildCacheTest, UnwritableDirectoryBuildsUncached) {
  WriteAll(root_ + "/plain-file", "x");
  const std::string dir = root_ + "/plain-file/builds";  // mkdir fails (ENOTDIR), even as root
  for (int i = 0; i < 2; ++i) {
    auto b = Build(Source(), Options(dir));
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->from_cache());
    EXPECT_EQ(ReadAll(b->library_path()), "fake library for the build cache test\n");
  }
  EXPECT_EQ(Calls(), 2);
}

TEST_F(BuildCacheTest, KeyFollowsTheSourceTheFlagsAndTheInputCount) {
  const std::string dir = root_ + "/cache";
  ASSERT_NE(Build(Source(), Options(dir)), nullptr);
  ASSERT_NE(Build(Source("return in0 + 1;"), Options(dir)), nullptr);
  Candidate flagged = Source();
  flagged.extra_flags = {"-DDICE_TEST_FLAG=1"};
  ASSERT_NE(Build(flagged, Options(dir)), nullptr);
  auto two = CompileExtensionCached(Source(), "sm_90", 2, Options(dir));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  auto other_arch = CompileExtensionCached(Source(), "sm_80", 1, Options(dir));
  ASSERT_TRUE(other_arch.ok()) << other_arch.status().ToString();
  EXPECT_EQ(Calls(), 5);
  EXPECT_EQ(Entries(dir, ".so").size(), 5u);
  EXPECT_TRUE(Build(Source(), Options(dir))->from_cache());
}

TEST_F(BuildCacheTest, DirectoryComesFromTheEnvironmentThenTheCacheDirRule) {
  const std::string env_dir = root_ + "/env-builds";
  ::setenv("DICE_BUILD_CACHE", env_dir.c_str(), 1);
  ASSERT_NE(Build(Source(), Options("")), nullptr);
  EXPECT_EQ(Entries(env_dir, ".so").size(), 1u);
  ::unsetenv("DICE_BUILD_CACHE");
  const char* old = std::getenv("DICE_CACHE_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("DICE_CACHE_DIR", (root_ + "/dice-cache").c_str(), 1);
  ASSERT_NE(Build(Source(), Options("")), nullptr);
  if (old != nullptr) {
    ::setenv("DICE_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("DICE_CACHE_DIR");
  }
  EXPECT_EQ(Entries(root_ + "/dice-cache/builds", ".so").size(), 1u);
}

// Neither $DICE_BUILD_CACHE nor $DICE_CACHE_DIR (set but empty counts as
// unset): the builds go to cache::DefaultCacheDir()'s $HOME/.cache/dice, beside
// the winners' database.
TEST_F(BuildCacheTest, DirectoryFallsBackToHomeLikeTheWinnersCache) {
  const char* old_dir = std::getenv("DICE_CACHE_DIR");
  const std::string saved_dir = old_dir != nullptr ? old_dir : "";
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home != nullptr ? old_home : "";
  ::setenv("DICE_CACHE_DIR", "", 1);
  ::setenv("HOME", (root_ + "/home").c_str(), 1);
  ASSERT_NE(Build(Source(), Options("")), nullptr);
  if (old_dir != nullptr) ::setenv("DICE_CACHE_DIR", saved_dir.c_str(), 1); else ::unsetenv("DICE_CACHE_DIR");
  if (old_home != nullptr) ::setenv("HOME", saved_home.c_str(), 1); else ::unsetenv("HOME");
  EXPECT_EQ(Entries(root_ + "/home/.cache/dice/builds", ".so").size(), 1u);
}

TEST_F(BuildCacheTest, ConcurrentMissesLeaveOneCompleteEntry) {
  const std::string dir = root_ + "/cache";
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto b = CompileExtensionCached(Source(), "sm_90", 1, Options(dir));
      ok[i] = b.ok() && ReadAll((*b)->library_path()) == "fake library for the build cache test\n";
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ok[i], 1) << i;
  EXPECT_EQ(Entries(dir, ".so").size(), 1u);
  EXPECT_EQ(Entries(dir, "").size(), 2u);
  EXPECT_TRUE(Build(Source(), Options(dir))->from_cache());
}

// The key holds contents, not paths: the same nvcc release and LibTorch
// headers installed elsewhere (another machine, a CI job's checkout) hit the
// entries a first install stored; another nvcc release or another
// torch/version.h misses.
TEST_F(BuildCacheTest, KeyFollowsTheToolchainsContentsNotItsPaths) {
  const std::string dir = root_ + "/cache";
  // As LibTorch 2.9+ lays them out: the numbers in torch/headeronly/version.h.
  const std::string version_h = "#include <torch/headeronly/version.h>\n";
  ASSERT_EQ(::mkdir((root_ + "/inc/torch/headeronly").c_str(), 0755), 0);
  WriteAll(root_ + "/inc/torch/version.h", version_h);
  WriteAll(root_ + "/inc/torch/headeronly/version.h", "#define TORCH_VERSION \"2.11.0\"\n");
  ASSERT_NE(Build(Source(), Options(dir)), nullptr);
  ASSERT_EQ(Calls(), 1);

  // Elsewhere: another nvcc path printing the same release, another
  // include and library dir with the same headers.
  ASSERT_EQ(::mkdir((root_ + "/elsewhere").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/elsewhere/include").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/elsewhere/include/torch").c_str(), 0755), 0);
  WriteAll(root_ + "/elsewhere/include/torch/types.h", "// stand-in\n");
  ASSERT_EQ(::mkdir((root_ + "/elsewhere/include/torch/headeronly").c_str(), 0755), 0);
  WriteAll(root_ + "/elsewhere/include/torch/version.h", version_h);
  WriteAll(root_ + "/elsewhere/include/torch/headeronly/version.h", "#define TORCH_VERSION \"2.11.0\"\n");
  WriteNvcc(root_ + "/elsewhere/nvcc", "stand-in nvcc, release 0.0");
  ExtensionCompileOptions moved = Options(dir);
  moved.nvcc = root_ + "/elsewhere/nvcc";
  moved.include_dirs = {root_ + "/elsewhere/include"};
  moved.torch_lib_dir = root_ + "/elsewhere/no-lib";
  auto hit = CompileExtensionCached(Source(), "sm_90", 1, moved);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_TRUE((*hit)->from_cache());
  EXPECT_EQ(Calls(), 1);

  // Another nvcc release: a miss, built.
  WriteNvcc(root_ + "/elsewhere/nvcc2", "stand-in nvcc, release 0.1");
  ExtensionCompileOptions newer = moved;
  newer.nvcc = root_ + "/elsewhere/nvcc2";
  auto built = CompileExtensionCached(Source(), "sm_90", 1, newer);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_FALSE((*built)->from_cache());
  EXPECT_EQ(Calls(), 2);

  // Another LibTorch (torch/headeronly/version.h): a miss, built.
  WriteAll(root_ + "/elsewhere/include/torch/headeronly/version.h", "#define TORCH_VERSION \"2.12.0\"\n");
  auto rebuilt = CompileExtensionCached(Source(), "sm_90", 1, moved);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().ToString();
  EXPECT_FALSE((*rebuilt)->from_cache());
  EXPECT_EQ(Calls(), 3);

  // Another build of that LibTorch (its libc10.so's size differs): a miss.
  ASSERT_EQ(::mkdir((root_ + "/elsewhere/lib").c_str(), 0755), 0);
  WriteAll(root_ + "/elsewhere/lib/libc10.so", "one build");
  ExtensionCompileOptions linked = moved;
  linked.torch_lib_dir = root_ + "/elsewhere/lib";
  ASSERT_NE(Build(Source(), linked), nullptr);
  WriteAll(root_ + "/elsewhere/lib/libc10.so", "another build");
  auto relinked = CompileExtensionCached(Source(), "sm_90", 1, linked);
  ASSERT_TRUE(relinked.ok()) << relinked.status().ToString();
  EXPECT_FALSE((*relinked)->from_cache());
  EXPECT_EQ(Calls(), 5);
  EXPECT_EQ(Entries(dir, ".so").size(), 5u);
}

// nvcc builds SASS for the task's arch only (-gencode, no PTX): -arch=sm_90a
// would also run cicc for compute_90 PTX, 13% of a CUTLASS build.
TEST_F(BuildCacheTest, NvccBuildsSassForTheTasksArchOnly) {
  Candidate sm90a = Source();
  sm90a.source = "// dice-nvcc-arch-feature: a\n" + sm90a.source;
  ASSERT_NE(Build(sm90a, Options("off")), nullptr);
  ASSERT_NE(Build(Source(), Options("off")), nullptr);
  const std::string log = ReadAll(root_ + "/args.log");
  EXPECT_NE(log.find("-gencode arch=compute_90a,code=sm_90a "), std::string::npos) << log;
  EXPECT_NE(log.find("-gencode arch=compute_90,code=sm_90 "), std::string::npos) << log;
  EXPECT_EQ(log.find("-arch"), std::string::npos) << log;
}

// A source that asks for cuBLASLt ("// dice-nvcc-link: cublasLt", the
// gemm_lt family) is linked against it, and gets its own cache key; a
// library outside the allowed list is refused before nvcc runs.
TEST_F(BuildCacheTest, LinkDirectiveAddsTheToolkitLibraryAndOnlyAllowedOnes) {
  const std::string dir = root_ + "/cache";
  Candidate lt = Source();
  lt.source = "// origin\n// dice-nvcc-link: cublasLt\n" + lt.source;
  auto libs = ExtensionLinkLibraries(lt);
  ASSERT_TRUE(libs.ok()) << libs.status().ToString();
  EXPECT_EQ(*libs, std::vector<std::string>{"cublasLt"});
  ASSERT_NE(Build(lt, Options(dir)), nullptr);
  const std::string log = ReadAll(root_ + "/args.log");
  EXPECT_NE(log.find(" -lcublasLt"), std::string::npos) << log;
  ASSERT_NE(Build(Source(), Options(dir)), nullptr);
  EXPECT_EQ(Calls(), 2) << "with and without the library are two builds";
  EXPECT_EQ(Entries(dir, ".so").size(), 2u);

  Candidate bad = Source();
  bad.origin = "test:bad-lib";
  bad.source = "// dice-nvcc-link: ssl\n" + bad.source;
  auto b = CompileExtensionCached(bad, "sm_90", 1, Options(dir));
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("asks to link 'ssl'"), std::string::npos) << b.status().ToString();
  EXPECT_EQ(Calls(), 2) << "refused before nvcc";
  // Not at a line start, or past the first 4,096 bytes: no directive.
  Candidate quoted = Source();
  quoted.source = "int x; // dice-nvcc-link: cublasLt\n" + quoted.source;
  EXPECT_TRUE(ExtensionLinkLibraries(quoted)->empty());
  Candidate late = Source();
  late.source = std::string(5000, '\n') + "// dice-nvcc-link: cublasLt\n" + late.source;
  EXPECT_TRUE(ExtensionLinkLibraries(late)->empty());
}

TEST_F(BuildCacheTest, CompileErrorsAreNotCached) {
  const std::string dir = root_ + "/cache";
  Candidate bad = Source();
  bad.source = "// no host function\n";
  auto b = CompileExtensionCached(bad, "sm_90", 1, Options(dir));
  EXPECT_EQ(b.status().code(), StatusCode::kCompileError);
  EXPECT_EQ(Calls(), 0);
  EXPECT_TRUE(Entries(dir, "").empty());
}

// Prebuild (issue 17, first-call time): four items, two of them the same
// source, one without dice_forward: two nvcc runs, one failure counted with
// its cause, and the tune's own CompileExtensionCached afterwards is a hit.
TEST_F(BuildCacheTest, PrebuildBuildsEachDistinctSourceOnceAndTheTuneThenHitsTheCache) {
  const std::string dir = root_ + "/cache";
  Candidate bad = Source();
  bad.origin = "test:no-entry";
  bad.source = "// no host function\n";
  std::vector<PrebuildItem> items = {{Source(), "sm_90", 1}, {Source(), "sm_90", 1},
                                     {Source("return in0 + 1;"), "sm_90", 1}, {bad, "sm_90", 1}};
  PrebuildReport r = PrebuildExtensions(items, 4, Options(dir));
  EXPECT_EQ(r.requested, 4);
  EXPECT_EQ(r.distinct, 3);
  EXPECT_EQ(r.built, 2);
  EXPECT_EQ(r.cached, 0);
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(r.first_error.find("test:no-entry"), std::string::npos) << r.first_error;
  EXPECT_EQ(Calls(), 2);
  EXPECT_EQ(Entries(dir, ".so").size(), 2u);
  EXPECT_TRUE(Build(Source(), Options(dir))->from_cache());
  EXPECT_EQ(Calls(), 2);

  PrebuildReport again = PrebuildExtensions(items, 2, Options(dir));
  EXPECT_EQ(again.built, 0);
  EXPECT_EQ(again.cached, 2);
  EXPECT_EQ(Calls(), 2);
}

TEST_F(BuildCacheTest, PrebuildWithTheBuildCacheOffBuildsNothing) {
  std::vector<PrebuildItem> items = {{Source(), "sm_90", 1}};
  PrebuildReport r = PrebuildExtensions(items, 2, Options("off"));
  EXPECT_EQ(r.distinct, 1);
  EXPECT_EQ(r.built + r.cached + r.failed, 0);
  EXPECT_EQ(Calls(), 0);
  ::setenv("DICE_BUILD_CACHE", "off", 1);
  r = PrebuildExtensions(items, 2, Options(root_ + "/cache"));
  EXPECT_EQ(r.built, 0);
  EXPECT_EQ(Calls(), 0);
}

TEST(PrebuildJobs, EnvironmentSetsTheCountZeroTurnsItOffJunkFallsBackToHalfTheThreads) {
  ::setenv("DICE_PREBUILD_JOBS", "3", 1);
  EXPECT_EQ(DefaultPrebuildJobs(), 3);
  ::setenv("DICE_PREBUILD_JOBS", "0", 1);
  EXPECT_EQ(DefaultPrebuildJobs(), 0);
  for (const char* junk : {"x", "-1", "65", "4k"}) {
    ::setenv("DICE_PREBUILD_JOBS", junk, 1);
    const int n = DefaultPrebuildJobs();
    EXPECT_GE(n, 1) << junk;
    EXPECT_LE(n, 16) << junk;
  }
  ::unsetenv("DICE_PREBUILD_JOBS");
  EXPECT_GE(DefaultPrebuildJobs(), 1);
}

}  // namespace
}  // namespace dice::runtime
