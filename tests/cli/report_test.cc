// The tuning report (cli/report.h): the `dice tune --json` document, the
// HTML page rendered from it (rows, escaping, "—" for what was not
// measured, the speedup plot, the end-to-end attribution), `dice report` on
// a results file and on a cache directory, the page in headless Chromium,
// and the attempts table a compile-only tune leaves behind.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "report.h"
#include "run_dice.h"
#include "dice/cache/store.h"
#include "dice/core/generator.h"
#include "dice/core/ir.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/tuner.h"

namespace dice::cli {
namespace {

using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;
using nlohmann::json;

// A GPU run's end-to-end times: original 100 µs, captured 80, optimized 50;
// outputs match; frozen; calls per forward not known.
EndToEnd Measured() {
  EndToEnd e;
  e.timed = true;
  e.before_us = 100;
  e.captured_us = 80;
  e.after_us = 50;
  e.outputs_match = true;
  e.match_detail = "max abs err 0";
  e.frozen = true;
  return e;
}

const char* kDash = "\u2014";

// Two measured groups (one tuned here, one served from the cache) and one
// group without a winner; hostile text in the model path, an origin, an
// error and the match detail.
const char* kFixture = R"({
  "model": "models/<b>net</b>.pt", "gpu": true, "compile_only": false,
  "before_us": 100.0, "captured_us": 80.0, "after_us": 50.0,
  "capture_speedup": 1.25, "winners_speedup": 1.6, "speedup": 2.0,
  "outputs_match": true, "match_detail": "max abs err 2e-07 & <ok>",
  "groups": [
    {"task_key": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "description": "relu,mul f32[64,64]",
     "baseline_us": 20.0, "best_us": 8.0, "speedup": 2.5, "winner": "template:elementwise/b256/v4",
     "from_cache": false, "tried": 4, "compiled": 2, "verified": 2, "tune_seconds": 3.5,
     "candidates": [
       {"origin": "template:elementwise/b256/v4", "hash": "h1", "outcome": "winner", "error": "",
        "compile_ms": 41.0, "time_us": 8.0, "speedup": 2.5},
       {"origin": "template:elementwise/b128/v1", "hash": "h2", "outcome": "slower", "error": "",
        "compile_ms": 39.0, "time_us": 19.5, "speedup": 1.0256},
       {"origin": "dice:sample1", "hash": "h3", "outcome": "compile_error",
        "error": "error: expected ';' before '<' token\n  x = a < b && c > d;\n<script>alert(1)</script>",
        "compile_ms": null, "time_us": null, "speedup": null},
       {"origin": "dice:<img src=x onerror=alert(2)>", "hash": "h4", "outcome": "parse_error",
        "error": "no code block & no dice_forward", "compile_ms": null, "time_us": null, "speedup": null}]},
    {"task_key": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "description": "sigmoid f16[8,4096]",
     "baseline_us": 12.0, "best_us": null, "speedup": null, "winner": "", "from_cache": false,
     "tried": 1, "compiled": 1, "verified": 1, "tune_seconds": 1.0,
     "candidates": [
       {"origin": "template:elementwise/b256/v2", "hash": "h5", "outcome": "slower", "error": "",
        "compile_ms": null, "time_us": 13.0, "speedup": 0.923}]},
    {"task_key": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", "description": "tanh f32[1024]",
     "baseline_us": 6.0, "best_us": 4.0, "speedup": 1.5, "winner": "template:elementwise/b128/v4",
     "from_cache": true, "tried": 0, "compiled": 0, "verified": 0, "tune_seconds": 0.01, "candidates": []}]
})";

json Fixture() { return json::parse(kFixture); }

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

// The text of the first element that starts with `open_tag` up to its `close_tag`.
std::string Element(const std::string& html, const std::string& open_tag, const std::string& close_tag) {
  const size_t begin = html.find(open_tag);
  if (begin == std::string::npos) return "";
  const size_t end = html.find(close_tag, begin);
  return end == std::string::npos ? "" : html.substr(begin, end - begin + close_tag.size());
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The `width` attribute of every <rect class="bar..."> in `html`, in order.
std::vector<int> BarWidths(const std::string& html) {
  std::vector<int> widths;
  std::regex bar("<rect class=\"bar[^\"]*\"[^>]*width=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), bar); it != std::sregex_iterator(); ++it) {
    widths.push_back(std::stoi((*it)[1]));
  }
  return widths;
}

// ------------------------------------------------------------ the page

TEST(ReportHtmlTest, ListsEveryCandidateWithOriginOutcomeErrorTimesAndSpeedup) {
  const std::string html = RenderReportHtml(Fixture());
  const std::string table = Element(html, "<table class=\"candidates\" id=\"candidates-1\">", "</table>");
  ASSERT_FALSE(table.empty()) << html;
  EXPECT_EQ(Count(table, "<tr class=\"cand "), 4u) << table;
  EXPECT_NE(table.find("<tr class=\"cand outcome-winner\"><td>template:elementwise/b256/v4</td>"
                       "<td class=\"outcome\">winner</td><td class=\"err\"></td><td class=\"n\">41 ms</td>"
                       "<td class=\"n\">8.0 \u00b5s</td><td class=\"n\">2.50x</td></tr>"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("<td class=\"n\">19.5 \u00b5s</td><td class=\"n\">1.03x</td>"), std::string::npos) << table;
  EXPECT_NE(table.find("<tr class=\"cand outcome-compile_error failed\"><td>dice:sample1</td>"), std::string::npos)
      << table;
  EXPECT_NE(table.find("error: expected &#39;;&#39; before &#39;&lt;&#39; token"), std::string::npos) << table;
  // The group's winner and the one served from the cache.
  EXPECT_NE(html.find("winner <b class=\"winner\">template:elementwise/b256/v4</b>"), std::string::npos) << html;
  EXPECT_NE(html.find("winner <b class=\"winner\">template:elementwise/b128/v4</b> (cached)"), std::string::npos);
  EXPECT_NE(html.find("winner <b class=\"winner\">none</b>"), std::string::npos) << html;
  EXPECT_NE(html.find("served from the cache: nothing was tried this run"), std::string::npos) << html;
}

TEST(ReportHtmlTest, EscapesEveryStringOfTheDocument) {
  const std::string html = RenderReportHtml(Fixture());
  EXPECT_EQ(html.find("<script"), std::string::npos) << html;
  EXPECT_EQ(html.find("<img"), std::string::npos) << html;
  EXPECT_EQ(html.find("<b>net</b>"), std::string::npos) << html;
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << html;
  EXPECT_NE(html.find("x = a &lt; b &amp;&amp; c &gt; d;"), std::string::npos) << html;
  EXPECT_NE(html.find("dice:&lt;img src=x onerror=alert(2)&gt;"), std::string::npos) << html;
  EXPECT_NE(html.find("models/&lt;b&gt;net&lt;/b&gt;.pt"), std::string::npos) << html;
  EXPECT_NE(html.find("max abs err 2e-07 &amp; &lt;ok&gt;"), std::string::npos) << html;
  EXPECT_EQ(HtmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  // A compiler log that is not UTF-8: each bad byte becomes U+FFFD.
  json doc = Fixture();
  doc["groups"][0]["candidates"][2]["error"] = std::string("nvcc: \xff\xfe bad");
  EXPECT_NE(RenderReportHtml(doc).find("nvcc: \ufffd\ufffd bad"), std::string::npos);
}

TEST(ReportHtmlTest, ShowsTimesThatWereNotMeasuredAsADash) {
  const std::string html = RenderReportHtml(Fixture());
  const std::string group2 = Element(html, "<section class=\"group\" id=\"group-2\">", "</section>");
  ASSERT_FALSE(group2.empty()) << html;
  EXPECT_NE(group2.find(std::string("best <b>") + kDash + "</b>"), std::string::npos) << group2;
  EXPECT_NE(group2.find(std::string("speedup <b>") + kDash + "</b>"), std::string::npos) << group2;
  // compile_ms null: a dash, never "0 ms".
  EXPECT_NE(group2.find(std::string("<td class=\"n\">") + kDash + "</td><td class=\"n\">13.0 \u00b5s</td>"),
            std::string::npos)
      << group2;
  const std::string table1 = Element(html, "<table class=\"candidates\" id=\"candidates-1\">", "</table>");
  EXPECT_NE(table1.find(std::string("<td class=\"n\">") + kDash + "</td><td class=\"n\">" + kDash +
                        "</td><td class=\"n\">" + kDash + "</td></tr>"),
            std::string::npos)
      << table1;
  EXPECT_EQ(html.find(" 0.0 \u00b5s"), std::string::npos) << html;
  EXPECT_EQ(html.find(">0 ms<"), std::string::npos) << html;

  // A compile-only document: every time and ratio of the end-to-end table is a dash.
  json doc = Fixture();
  for (const char* k : {"before_us", "captured_us", "after_us", "capture_speedup", "winners_speedup", "speedup"}) {
    doc[k] = nullptr;
  }
  doc["gpu"] = false;
  const std::string e2e = Element(RenderReportHtml(doc), "<table id=\"end-to-end\">", "</table>");
  EXPECT_EQ(Count(e2e, std::string("<td class=\"n\">") + kDash + "</td>"), 6u) << e2e;
  EXPECT_NE(RenderReportHtml(doc).find("compile-only (no GPU)"), std::string::npos);
}

TEST(ReportHtmlTest, AttributesTheEndToEndGainToCaptureAndToWinners) {
  const std::string e2e = Element(RenderReportHtml(Fixture()), "<table id=\"end-to-end\">", "</table>");
  ASSERT_FALSE(e2e.empty());
  EXPECT_NE(e2e.find("<td class=\"n\">100.0 \u00b5s</td><td class=\"n\">80.0 \u00b5s</td><td class=\"n\">50.0 \u00b5s</td>"
                     "<td class=\"n\">1.25x</td><td class=\"n\">1.60x</td><td class=\"n\">2.00x</td>"
                     "<td>match eager (max abs err 2e-07 &amp; &lt;ok&gt;)</td>"),
            std::string::npos)
      << e2e;
}

TEST(ReportHtmlTest, PlotsOneBarPerGroupWithASpeedupScaledToIt) {
  const std::string html = RenderReportHtml(Fixture());
  const std::string svg = Element(html, "<svg id=\"speedup-plot\"", "</svg>");
  ASSERT_FALSE(svg.empty()) << html;
  EXPECT_EQ(Count(svg, "<g class=\"row\""), 3u) << svg;
  const std::vector<int> widths = BarWidths(svg);
  ASSERT_EQ(widths.size(), 2u) << svg;  // the group without a winner has no bar, only a dash
  EXPECT_NEAR(static_cast<double>(widths[0]) / widths[1], 2.5 / 1.5, 0.02) << svg;
  EXPECT_NE(svg.find(">2.50x</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(std::string(">") + kDash + "</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("<line class=\"one\""), std::string::npos) << svg;
}

TEST(ReportHtmlTest, IsOnePageThatLoadsNothing) {
  const std::string html = RenderReportHtml(Fixture());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  for (const char* external : {"<script", "<link", "<img", "<iframe", "<object", "<embed", "href=", "http:", "https:",
                               "@import", "url("}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }
}

TEST(ReportHtmlTest, ReadsFieldsOfTheWrongTypeAsMissing) {
  json doc = json::parse(R"({"model": 7, "groups": [{"description": ["x"], "speedup": "fast",
                            "candidates": [{"origin": null, "time_us": "1"}, 5]}, 3]})");
  const std::string html = RenderReportHtml(doc);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  EXPECT_TRUE(BarWidths(html).empty()) << html;
}

// ------------------------------------------------------------ the document

TEST(ReportJsonTest, CompileOnlyWritesNullForEveryTimeItDidNotMeasure) {
  runtime::TuneReport r;
  r.task_key = "k";
  r.description = "relu f32[8]";
  runtime::CandidateOutcome compiled;
  compiled.origin = "template:a";
  compiled.outcome = runtime::Outcome::kCompiled;
  compiled.compile_ms = 12.5;
  runtime::CandidateOutcome broken;
  broken.origin = "template:b";
  broken.outcome = runtime::Outcome::kCompileError;
  broken.error = "error: <oops>";
  r.outcomes = {compiled, broken};
  EndToEnd e2e;  // timed = false: compile-only
  e2e.before_us = 1234;  // a CPU time, not a speedup measurement
  e2e.after_us = 1200;
  e2e.outputs_match = true;
  const json doc = TuneDocument("m.pt", {r}, e2e);
  EXPECT_EQ(doc["compile_only"], true);
  for (const char* k : {"before_us", "captured_us", "after_us", "capture_speedup", "winners_speedup", "speedup"}) {
    EXPECT_TRUE(doc[k].is_null()) << k << " = " << doc[k];
  }
  const json& g = doc["groups"][0];
  for (const char* k : {"baseline_us", "best_us", "speedup"}) EXPECT_TRUE(g[k].is_null()) << k << " = " << g[k];
  ASSERT_EQ(g["candidates"].size(), 2u);
  EXPECT_EQ(g["candidates"][0]["outcome"], "compiled");
  EXPECT_EQ(g["candidates"][0]["compile_ms"], 12.5);
  EXPECT_TRUE(g["candidates"][0]["time_us"].is_null());
  EXPECT_TRUE(g["candidates"][0]["speedup"].is_null());
  EXPECT_EQ(g["candidates"][1]["outcome"], "compile_error");
  EXPECT_EQ(g["candidates"][1]["error"], "error: <oops>");
  EXPECT_TRUE(g["candidates"][1]["compile_ms"].is_null());
}

TEST(ReportJsonTest, TimedRunCarriesEachCandidatesSpeedupOverTheBaseline) {
  runtime::TuneReport r;
  r.baseline_us = 30;
  r.best_us = 10;
  r.speedup = 3;
  r.winner_origin = "template:w";
  runtime::CandidateOutcome w;
  w.origin = "template:w";
  w.outcome = runtime::Outcome::kWinner;
  w.time_us = 10;
  runtime::CandidateOutcome failed;
  failed.origin = "template:f";
  failed.outcome = runtime::Outcome::kVerifyFailed;
  failed.error = "output 0 differs";
  r.outcomes = {w, failed};
  EndToEnd e2e = Measured();
  const json doc = TuneDocument("m.pt", {r}, e2e);
  EXPECT_DOUBLE_EQ(doc["capture_speedup"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(doc["winners_speedup"].get<double>(), 1.6);
  EXPECT_DOUBLE_EQ(doc["speedup"].get<double>(), 2.0);
  const json& c = doc["groups"][0]["candidates"];
  EXPECT_DOUBLE_EQ(c[0]["speedup"].get<double>(), 3.0);
  EXPECT_EQ(c[0]["outcome"], "winner");
  EXPECT_TRUE(c[1]["time_us"].is_null());
  EXPECT_TRUE(c[1]["speedup"].is_null());
  EXPECT_EQ(c[1]["error"], "output 0 differs");
  EXPECT_EQ(doc["groups"][0]["winner"], "template:w");
}

TEST(ReportJsonTest, SummarisesEachCandidateSourceDecodedCompiledVerifiedBestAndWon) {
  const json by = GeneratorSummary(Fixture()["groups"][0]["candidates"], "template:elementwise/b256/v4");
  ASSERT_EQ(by.size(), 2u) << by.dump();
  EXPECT_EQ(by["template"]["candidates"], 2);
  EXPECT_EQ(by["template"]["compiled"], 2);
  EXPECT_EQ(by["template"]["verified"], 2);
  EXPECT_DOUBLE_EQ(by["template"]["best_us"].get<double>(), 8.0);
  EXPECT_TRUE(by["template"]["won"].get<bool>());
  // Two samples decoded: one not a candidate (parse_error), one that did not compile.
  EXPECT_EQ(by["dice"]["candidates"], 2);
  EXPECT_EQ(by["dice"]["parsed"], 1);
  EXPECT_EQ(by["dice"]["compiled"], 0);
  EXPECT_EQ(by["dice"]["verified"], 0);
  EXPECT_TRUE(by["dice"]["best_us"].is_null());
  EXPECT_FALSE(by["dice"]["won"].get<bool>());
}

TEST(ReportJsonTest, GeneratorSummaryReadsMalformedCandidateRowsAsMissing) {
  EXPECT_EQ(GeneratorSummary(json("not an array"), "dice:sample0"), json::object());
  const json by = GeneratorSummary(
      json::parse(R"([5, null, {"origin": "dice:sample0", "outcome": "verified", "time_us": "1"},
                      {"origin": 7, "outcome": ["winner"]}])"),
      "dice:sample0");
  ASSERT_EQ(by.size(), 2u) << by.dump();  // "dice" and "7" (an origin that is not text, shown as written)
  EXPECT_EQ(by["dice"]["candidates"], 1);
  EXPECT_EQ(by["dice"]["verified"], 1);
  EXPECT_TRUE(by["dice"]["best_us"].is_null()) << "a time that is not a number is not a time";
  EXPECT_TRUE(by["dice"]["won"].get<bool>());
  ASSERT_TRUE(by.contains("7")) << by.dump();
  EXPECT_EQ(by["7"]["verified"], 0) << "an outcome that is not text is no outcome";
}

TEST(ReportJsonTest, ASkippedGeneratorCountsUnderItsNameAndAWinningDiceSampleWins) {
  runtime::TuneReport r;
  r.baseline_us = 30;
  r.best_us = 9;
  r.speedup = 30.0 / 9;
  r.winner_origin = "dice:sample0";
  runtime::CandidateOutcome d;
  d.origin = "dice:sample0";
  d.outcome = runtime::Outcome::kWinner;
  d.time_us = 9;
  runtime::CandidateOutcome t;
  t.origin = "template:w";
  t.outcome = runtime::Outcome::kSlower;
  t.time_us = 12;
  runtime::CandidateOutcome skipped;
  skipped.origin = "generator:dice";
  skipped.outcome = runtime::Outcome::kSkipped;
  skipped.error = "budget spent";
  r.outcomes = {d, t, skipped};
  const json by = TuneDocument("m.pt", {r}, Measured())["groups"][0]["by_generator"];
  EXPECT_EQ(by["dice"]["candidates"], 2) << by.dump();
  EXPECT_EQ(by["dice"]["parsed"], 1);
  EXPECT_DOUBLE_EQ(by["dice"]["best_us"].get<double>(), 9.0);
  EXPECT_TRUE(by["dice"]["won"].get<bool>());
  EXPECT_DOUBLE_EQ(by["template"]["best_us"].get<double>(), 12.0);
  EXPECT_FALSE(by["template"]["won"].get<bool>());
}

TEST(ReportHtmlTest, ShowsASourceTableWhereDiceCandidatesWereTriedOnly) {
  const std::string html = RenderReportHtml(Fixture());
  EXPECT_NE(html.find("id=\"generators-1\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"generators-2\""), std::string::npos);  // templates alone
  const std::string table = Element(html, "<table class=\"generators\"", "</table>");
  EXPECT_NE(table.find("data-source=\"dice\""), std::string::npos) << table;
  EXPECT_NE(table.find("data-source=\"template\""), std::string::npos) << table;
  EXPECT_NE(table.find("8.0 \u00b5s"), std::string::npos) << table;
}

TEST(ReportJsonTest, CarriesTheMemoryFormatDecisionWithBothTimesOrNull) {
  runtime::TuneReport r;
  EndToEnd measured = Measured();
  measured.memory_format = "channels_last";
  measured.memory_format_reason = "auto: channels_last 70.0 µs vs contiguous 80.0 µs";
  measured.memory_format_us = {80.0, 70.0};
  const json doc = TuneDocument("m.pt", {r}, measured);
  EXPECT_EQ(doc["memory_format"]["format"], "channels_last");
  EXPECT_EQ(doc["memory_format"]["reason"], measured.memory_format_reason);
  EXPECT_DOUBLE_EQ(doc["memory_format"]["contiguous_us"].get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(doc["memory_format"]["channels_last_us"].get<double>(), 70.0);
  EndToEnd cpu;  // compile-only: nothing timed
  cpu.memory_format_reason = "no CUDA example inputs";
  const json d2 = TuneDocument("m.pt", {r}, cpu);
  EXPECT_EQ(d2["memory_format"]["format"], "contiguous");
  EXPECT_TRUE(d2["memory_format"]["contiguous_us"].is_null());
  EXPECT_TRUE(d2["memory_format"]["channels_last_us"].is_null());
}

TEST(ReportJsonTest, CarriesTheAttentionDecisionWithBothTimesOrNull) {
  runtime::TuneReport r;
  EndToEnd measured = Measured();
  measured.attention = "sdpa";
  measured.attention_reason = "auto: sdpa 40.0 µs vs unfused 90.0 µs (1 chain(s), 1 masked)";
  measured.attention_us = {90.0, 40.0};
  const json doc = TuneDocument("m.pt", {r}, measured);
  EXPECT_EQ(doc["attention"]["choice"], "sdpa");
  EXPECT_EQ(doc["attention"]["reason"], measured.attention_reason);
  EXPECT_DOUBLE_EQ(doc["attention"]["unfused_us"].get<double>(), 90.0);
  EXPECT_DOUBLE_EQ(doc["attention"]["sdpa_us"].get<double>(), 40.0);
  const json d2 = TuneDocument("m.pt", {r}, EndToEnd{});  // compile-only: nothing timed
  EXPECT_EQ(d2["attention"]["choice"], "unfused");
  EXPECT_TRUE(d2["attention"]["unfused_us"].is_null());
  EXPECT_TRUE(d2["attention"]["sdpa_us"].is_null());
  EXPECT_EQ(d2["attention"]["backend"], "dispatch");
  EXPECT_TRUE(d2["attention"]["backends"].empty());
  EXPECT_EQ(d2["conv_algorithm"]["choice"], "heuristic");
  EXPECT_TRUE(d2["conv_algorithm"]["heuristic_us"].is_null());
  measured.conv_algorithm = "benchmark";
  measured.conv_algorithm_us = {120.0, 100.0};
  const json d3 = TuneDocument("m.pt", {r}, measured);
  EXPECT_EQ(d3["conv_algorithm"]["choice"], "benchmark");
  EXPECT_DOUBLE_EQ(d3["conv_algorithm"]["heuristic_us"].get<double>(), 120.0);
  EXPECT_DOUBLE_EQ(d3["conv_algorithm"]["benchmark_us"].get<double>(), 100.0);
}

TEST(ReportJsonTest, CarriesEachSdpaBackendWithItsTimeOrItsError) {
  runtime::TuneReport r;
  EndToEnd measured = Measured();
  measured.attention = "sdpa";
  measured.attention_backend = "cudnn";
  measured.attention_backend_reason = "dispatch 50.0 µs, cudnn 40.0 µs (1 call(s) pinned to cudnn)";
  measured.attention_backends = {{"dispatch", 50.0, ""},
                                 {"flash", 0, "flash cannot take scaled_dot_product_attention %y: it has a mask"},
                                 {"cudnn", 40.0, ""}};
  const json doc = TuneDocument("m.pt", {r}, measured);
  EXPECT_EQ(doc["attention"]["backend"], "cudnn");
  EXPECT_EQ(doc["attention"]["backend_reason"], measured.attention_backend_reason);
  const json& rows = doc["attention"]["backends"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["backend"], "dispatch");
  EXPECT_DOUBLE_EQ(rows[0]["us"].get<double>(), 50.0);
  EXPECT_TRUE(rows[1]["us"].is_null());
  EXPECT_EQ(rows[1]["error"], measured.attention_backends[1].error);
  EXPECT_DOUBLE_EQ(rows[2]["us"].get<double>(), 40.0);
}

TEST(ReportJsonTest, CreditsEachWinnerWithWhatItSavedPerForwardOrPerCall) {
  runtime::TuneReport repeated;  // a block that runs three times per forward
  repeated.task_key = "k3";
  repeated.baseline_us = 30;
  repeated.best_us = 10;
  repeated.speedup = 3;
  repeated.winner_origin = "template:w";
  runtime::TuneReport unknown = repeated;  // calls of one forward not known
  unknown.task_key = "k?";
  runtime::TuneReport no_winner;
  no_winner.task_key = "k0";
  no_winner.baseline_us = 30;
  EndToEnd e2e = Measured();
  e2e.frozen = false;
  e2e.calls_per_forward = {{"k3", 3}, {"k0", 1}};
  const json doc = TuneDocument("m.pt", {repeated, unknown, no_winner}, e2e);
  EXPECT_EQ(doc["frozen"], false);
  const json& g = doc["groups"];
  EXPECT_EQ(g[0]["calls_per_forward"], 3);
  EXPECT_DOUBLE_EQ(g[0]["saved_us"].get<double>(), 60.0);
  EXPECT_EQ(g[0]["saved_per"], "forward");
  EXPECT_TRUE(g[1]["calls_per_forward"].is_null());
  EXPECT_DOUBLE_EQ(g[1]["saved_us"].get<double>(), 20.0);
  EXPECT_EQ(g[1]["saved_per"], "call");
  EXPECT_EQ(g[2]["calls_per_forward"], 1);
  EXPECT_TRUE(g[2]["saved_us"].is_null());
  EXPECT_TRUE(g[2]["saved_per"].is_null());
  const std::string html = RenderReportHtml(doc);
  const std::string group1 = Element(html, "<section class=\"group\" id=\"group-1\">", "</section>");
  EXPECT_NE(group1.find("saved <b class=\"saved\">60.0 \u00b5s per forward</b> (3 call(s))"), std::string::npos)
      << group1;
  const std::string group2 = Element(html, "<section class=\"group\" id=\"group-2\">", "</section>");
  EXPECT_NE(group2.find("saved <b class=\"saved\">20.0 \u00b5s per call</b>"), std::string::npos) << group2;
  EXPECT_NE(html.find("captured unfrozen"), std::string::npos);
  // Compile-only: nothing saved is claimed.
  e2e.timed = false;
  for (const json& cg : TuneDocument("m.pt", {repeated}, e2e)["groups"]) EXPECT_TRUE(cg["saved_us"].is_null()) << cg;
}

// ------------------------------------------------------------ dice report

TEST(ReportCommandTest, RendersAResultsJsonFile) {
  ScratchDir dir("dice_report_json");
  const std::string in = dir.path() + "/results.json", out = dir.path() + "/page.html";
  WriteText(in, kFixture);
  DiceResult r = RunDice("report " + in + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3 group(s)"), std::string::npos) << r.output;
  EXPECT_EQ(ReadText(out), RenderReportHtml(Fixture()));
}

cache::WinnerRecord MakeWinner(const std::string& key, const std::string& origin) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 1}};
  ir::Op op;
  op.kind = ir::OpKind::kRelu;
  op.args = {0};
  g.ops = {op};
  g.outputs = {1};
  cache::WinnerRecord w;
  w.task_key = key;
  w.graph_canonical = ir::Canonical(g);
  w.input_specs = "f32[4099]";
  w.arch = "sm_90";
  w.gpu_name = "NVIDIA H200";
  w.origin = origin;
  w.candidate_hash = "hw";
  w.source = "__global__ void k() {}";
  w.cubin = "ELF";
  w.launch_plan_json = "{}";
  w.baseline_us = 9;
  w.best_us = 3;
  w.speedup = 3;
  w.versions_json = "{}";
  return w;
}

TEST(ReportCommandTest, RendersACacheDirectoryWithItsWinnersAndTheirAttempts) {
  ScratchDir dir("dice_report_cache");
  const std::string key(64, 'd');
  {
    auto store = cache::Store::Open(cache::DatabasePath(dir.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->PutWinner(MakeWinner(key, "template:elementwise/b256/v4")).ok());
    cache::AttemptRecord won{key, "hw", "template:elementwise/b256/v4", "winner", "", 3, 0};
    cache::AttemptRecord broke{key, "hb", "dice:sample0", "compile_error", "error: a < b && c > d", 0, 0};
    cache::AttemptRecord slow{key, "hs", "template:elementwise/b128/v1", "slower", "", 9.5, 0};
    for (const auto& a : {won, broke, slow}) ASSERT_TRUE((*store)->RecordAttempt(a).ok());
  }
  const std::string out = dir.path() + "/cache.html";
  DiceResult r = RunDice("report " + dir.path() + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string html = ReadText(out);
  EXPECT_NE(html.find("relu f32[4099]"), std::string::npos) << html;
  EXPECT_NE(html.find("winner <b class=\"winner\">template:elementwise/b256/v4</b> (cached)"), std::string::npos);
  const std::string table = Element(html, "<table class=\"candidates\" id=\"candidates-1\">", "</table>");
  EXPECT_EQ(Count(table, "<tr class=\"cand "), 3u) << table;
  EXPECT_NE(table.find("<tr class=\"cand outcome-compile_error failed\"><td>dice:sample0</td>"
                       "<td class=\"outcome\">compile_error</td><td class=\"err\">error: a &lt; b &amp;&amp; c &gt; d</td>"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("<td class=\"n\">9.5 \u00b5s</td><td class=\"n\">0.95x</td>"), std::string::npos) << table;
  EXPECT_NE(html.find(">3.00x</text>"), std::string::npos) << html;  // the plot's bar label
}

TEST(ReportCommandTest, RejectsASourceThatIsNeitherAResultsFileNorACache) {
  ScratchDir dir("dice_report_bad");
  DiceResult missing = RunDice("report " + dir.path() + "/nope.json -o " + dir.path() + "/a.html");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("nope.json"), std::string::npos) << missing.output;
  WriteText(dir.path() + "/bad.json", "{not json");
  DiceResult bad = RunDice("report " + dir.path() + "/bad.json -o " + dir.path() + "/b.html");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("not a tuning report"), std::string::npos) << bad.output;
  // An empty directory is no cache, and reporting on it creates none.
  const std::string empty = dir.path() + "/empty";
  ASSERT_EQ(std::system(("mkdir '" + empty + "'").c_str()), 0);
  DiceResult none = RunDice("report " + empty + " -o " + dir.path() + "/c.html");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("not a kernel cache"), std::string::npos) << none.output;
  std::ifstream created(cache::DatabasePath(empty));
  EXPECT_FALSE(created.good()) << "a kernels.db was created";
}

// ------------------------------------------------------------ in a browser

// The first of chromium / chromium-browser / google-chrome on PATH, or "".
std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    if (std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0) return name;
  }
  return "";
}

std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(ReportBrowserTest, HeadlessChromiumShowsEveryCandidateRowAndTheBars) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package `chromium`; scripts/setup.sh installs it)";
  }
  ScratchDir dir("dice_report_browser");
  const std::string in = dir.path() + "/results.json", page = dir.path() + "/report.html";
  WriteText(in, kFixture);
  DiceResult r = RunDice("report " + in + " -o " + page);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string flags = " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" +
                            dir.path() + "/profile ";
  // The DOM the browser built from the page (after its own HTML parsing).
  const std::string dom = Capture("timeout 90 " + chromium + flags + "--dump-dom file://" + page + " 2>/dev/null");
  ASSERT_NE(dom.find("<table class=\"candidates\" id=\"candidates-1\">"), std::string::npos) << dom;
  const std::string table = Element(dom, "<table class=\"candidates\" id=\"candidates-1\">", "</table>");
  EXPECT_EQ(Count(table, "<tr class=\"cand "), 4u) << table;
  std::regex row("<tr class=\"cand [^\"]*\"><td>([^<]*)</td><td class=\"outcome\">([a-z_]+)</td>");
  std::vector<std::string> outcomes;
  for (auto it = std::sregex_iterator(table.begin(), table.end(), row); it != std::sregex_iterator(); ++it) {
    outcomes.push_back((*it)[2]);
  }
  EXPECT_EQ(outcomes, (std::vector<std::string>{"winner", "slower", "compile_error", "parse_error"})) << table;
  // Hostile text stayed text: no element was injected.
  EXPECT_EQ(dom.find("<script"), std::string::npos) << dom;
  EXPECT_EQ(dom.find("<img"), std::string::npos) << dom;
  EXPECT_NE(dom.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos) << dom;
  // The plot: an SVG element with the two bars, longest for the fastest group.
  const std::string svg = Element(dom, "<svg id=\"speedup-plot\"", "</svg>");
  ASSERT_FALSE(svg.empty()) << dom;
  const std::vector<int> widths = BarWidths(svg);
  ASSERT_EQ(widths.size(), 2u) << svg;
  EXPECT_GT(widths[0], widths[1]);
  EXPECT_NE(svg.find(">2.50x</text>"), std::string::npos) << svg;
  // And it renders: a screenshot of the page is a PNG image.
  const std::string png = dir.path() + "/report.png";
  Capture("timeout 90 " + chromium + flags + "--window-size=1200,900 --screenshot=" + png + " file://" + page +
          " 2>/dev/null");
  const std::string image = ReadText(png);
  ASSERT_GT(image.size(), 1000u) << "no screenshot";
  EXPECT_EQ(image.substr(1, 3), "PNG");
}

// ------------------------------------------------------------ dice tune, compile-only

class CompileOnlyTuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: the compile-only path does not apply";
    dir_ = std::make_unique<ScratchDir>("dice_report_tune");
    model_ = dir_->path() + "/model.pt";
    // Scripted by PyTorch's Python (this file stays free of torch headers).
    const std::string script = dir_->path() + "/make_model.py";
    WriteText(script, "import sys, torch\n"
                      "class M(torch.nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        return torch.relu(x * 2.0) + 1.0\n"
                      "torch.jit.script(M()).save(sys.argv[1])\n");
    ASSERT_EQ(std::system(("python3 '" + script + "' '" + model_ + "'").c_str()), 0) << "python3 + torch needed";
  }
  std::unique_ptr<ScratchDir> dir_;
  std::string model_;
};

TEST_F(CompileOnlyTuneTest, JsonWritesNullForUnmeasuredTimesAndThePageSaysCompileOnly) {
  const std::string json_path = dir_->path() + "/tune.json", page = dir_->path() + "/tune.html",
                    cache_dir = dir_->path() + "/cache";
  DiceResult r = RunDice("tune " + model_ + " --input 64x64:f32 --max-candidates 4 --cache " + cache_dir +
                         " --json " + json_path + " --report " + page);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dice: JSON report written to " + json_path), std::string::npos) << r.output;
  const json doc = json::parse(ReadText(json_path));
  EXPECT_EQ(doc["gpu"], false);
  EXPECT_EQ(doc["compile_only"], true);
  for (const char* k : {"before_us", "captured_us", "after_us", "capture_speedup", "winners_speedup", "speedup"}) {
    ASSERT_TRUE(doc.contains(k)) << k;
    EXPECT_TRUE(doc[k].is_null()) << k << " = " << doc[k];
  }
  EXPECT_EQ(doc["frozen"], true);
  // The human output says the attribution was not measured, in its one line.
  EXPECT_NE(r.output.find("capture alone (freeze, folding): not measured; dice winners: not measured; total not "
                          "measured"),
            std::string::npos)
      << r.output;
  ASSERT_FALSE(doc["groups"].empty()) << doc.dump(2);
  size_t failed = 0;
  for (const json& g : doc["groups"]) {
    for (const char* k : {"baseline_us", "best_us", "speedup", "saved_us", "saved_per"}) {
      ASSERT_TRUE(g.contains(k)) << k;
      EXPECT_TRUE(g[k].is_null()) << k << " = " << g[k];
    }
    ASSERT_FALSE(g["candidates"].empty()) << g.dump(2);
    for (const json& c : g["candidates"]) {
      EXPECT_TRUE(c["time_us"].is_null()) << c.dump();
      EXPECT_TRUE(c["speedup"].is_null()) << c.dump();
      EXPECT_TRUE(c["outcome"] == "compiled" || c["outcome"] == "compile_error") << c.dump();
      if (c["outcome"] == "compiled") {
        EXPECT_GT(c["compile_ms"].get<double>(), 0.0) << c.dump();
      }
      failed += c["outcome"] == "compile_error";
    }
  }
  const std::string html = ReadText(page);
  EXPECT_NE(html.find("compile-only (no GPU)"), std::string::npos) << html;
  EXPECT_EQ(Count(html, "<tr class=\"cand "), [&] {
    size_t n = 0;
    for (const json& g : doc["groups"]) n += g["candidates"].size();
    return n;
  }());
  EXPECT_NE(html.find(std::string("<td class=\"n\">") + kDash + "</td>"), std::string::npos);
  // Compile-only stores no winner, and only the failures as attempts: a
  // candidate that merely compiled must still be verified by a GPU tune.
  auto store = cache::Store::Open(cache::DatabasePath(cache_dir));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto winners = (*store)->ListWinners();
  ASSERT_TRUE(winners.ok());
  EXPECT_TRUE(winners->empty());
  size_t recorded = 0;
  for (const json& g : doc["groups"]) {
    auto attempts = (*store)->ListAttempts(g["task_key"].get<std::string>());
    ASSERT_TRUE(attempts.ok());
    for (const auto& a : *attempts) EXPECT_EQ(a.outcome, "compile_error") << a.origin;
    recorded += attempts->size();
  }
  EXPECT_EQ(recorded, failed);
}

// A generator whose one candidate does not compile and one of whose outputs held no code.
class BrokenGenerator : public KernelGenerator {
 public:
  std::string name() const override { return "broken"; }
  Expected<std::vector<Candidate>> Generate(const Task&, int) override {
    Candidate c;
    c.origin = "broken:syntax";
    c.source = "extern \"C\" __global__ void k(const float* in0, float* out0) { this is not CUDA < & > }";
    c.plan.launches = {KernelLaunch{"k", {1, 1, 1}, {32, 1, 1}, 0}};
    failures_ = {GenerationFailure{"broken:sample1", "no ```cuda block in the answer", "I would <rather> not"}};
    return std::vector<Candidate>{c};
  }
  std::vector<GenerationFailure> TakeFailures() override { return std::move(failures_); }

 private:
  std::vector<GenerationFailure> failures_;
};

TEST(AttemptsTableTest, CompileOnlyRecordsEveryFailedCandidateWithItsCauseAndNoWinner) {
  ScratchDir dir("dice_report_attempts");
  auto store = cache::Store::Open(cache::DatabasePath(dir.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 1}};
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {0};
  g.ops = {relu};
  g.outputs = {1};
  auto task = Task::Make(g, {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})}, TargetInfo{});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  runtime::TuneOptions opt;
  opt.compile_only = true;
  opt.max_candidates = 2;
  runtime::Tuner tuner(store->get(), {std::make_shared<generator::TemplateGenerator>(), std::make_shared<BrokenGenerator>()}, opt);
  auto report = tuner.Tune(*task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto attempts = (*store)->ListAttempts(task->Key());
  ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
  std::vector<std::string> failed;
  for (const auto& a : *attempts) {
    EXPECT_NE(a.outcome, "compiled") << a.origin << ": a compiled candidate is not an attempt";
    EXPECT_FALSE(a.error.empty()) << a.origin << " was recorded without its cause";
    if (a.origin.rfind("broken:", 0) == 0) failed.push_back(a.origin + " " + a.outcome);
  }
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, (std::vector<std::string>{"broken:sample1 parse_error", "broken:syntax compile_error"}));
  for (const auto& a : *attempts) {
    if (a.origin == "broken:sample1") {
      EXPECT_EQ(a.error, "no ```cuda block in the answer");
    }
  }
  auto winner = (*store)->GetWinner(task->Key());
  ASSERT_TRUE(winner.ok());
  EXPECT_FALSE(winner->has_value());
}

}  // namespace
}  // namespace dice::cli
