// Mixed precision from the command line: `gradsleuth train --precision bf16|fp16` (autocast, the loss
// scaler, master weights, the precision checks' findings) and `gradsleuth precision` (M30's per-op table),
// on small slices of Fashion-MNIST. Fails, saying how to install it, when the dataset is missing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "fashion_mnist_required.h"
#include "json_mini.h"

namespace fs = std::filesystem;

namespace {

using clitest::last_line;

json_mini::Value run_json(const std::string& args) {
  const clitest::Run r = clitest::run_cli(args, true);
  REQUIRE_MESSAGE(r.status == 0, args, " failed: ", r.out);
  json_mini::Value doc;
  REQUIRE_NOTHROW(doc = json_mini::parse(last_line(r.out)));
  return doc;
}

// The checks named in train's precision_checks array.
std::vector<std::string> checks_of(const json_mini::Value& doc) {
  std::vector<std::string> out;
  const json_mini::Value* pc = doc.get("precision_checks");
  REQUIRE(pc != nullptr);
  for (const json_mini::Value& f : pc->arr) out.push_back(f.get("check")->str);
  return out;
}
bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

const std::string kSmall = " --model mlp --epochs 1 --limit-train 640 --limit-test 300 --threads 1 --quiet --json";

}  // namespace

TEST_CASE("train --precision bf16: autocast, no loss scaler, the range watch and the per-op comparison reported") {
  testdata::require_fashion_mnist();
  const json_mini::Value doc = run_json("train --precision bf16" + kSmall);
  CHECK(doc.get("precision")->str == "bf16");
  CHECK(doc.get("master_weights")->b == false);
  CHECK(doc.get("loss_scale")->kind == json_mini::Value::Null);
  CHECK(doc.get("test_accuracy")->num > 0.3);
  const auto checks = checks_of(doc);
  CHECK(has(checks, "M28"));
  CHECK(has(checks, "M30"));
  CHECK_FALSE(has(checks, "O10"));  // no scaler, no O10
  CHECK(doc.get("check_every")->num == 100);
  // --no-precision-checks: no monitor, and the JSON says so.
  const json_mini::Value bare = run_json("train --precision bf16 --no-precision-checks" + kSmall);
  CHECK(bare.get("precision_checks")->kind == json_mini::Value::Null);
  CHECK(bare.get("check_every")->kind == json_mini::Value::Null);
  CHECK(bare.get("train_loss")->num == doc.get("train_loss")->num);  // the monitor does not change the run
  // float32: no precision keys beyond the name, nothing scaled.
  const json_mini::Value f32 = run_json("train" + kSmall);
  CHECK(f32.get("precision")->str == "float32");
  CHECK(f32.get("precision_checks") == nullptr);
  // The 16-bit run computed something else than float32 (the flag was not ignored).
  CHECK(f32.get("train_loss")->num != doc.get("train_loss")->num);
}

TEST_CASE("train --precision fp16: the GradScaler's scale, its skipped steps and scale.csv") {
  testdata::require_fashion_mnist();
  const fs::path dir = fs::temp_directory_path() / ("gs_cli_precision_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A scale of 2^20 overflows float16 at once: the first steps are skipped and the scale backs off.
  const json_mini::Value doc =
      run_json("train --precision fp16 --loss-scale 1048576 --run-dir " + dir.string() + kSmall);
  CHECK(doc.get("precision")->str == "fp16");
  const json_mini::Value* ls = doc.get("loss_scale");
  REQUIRE(ls != nullptr);
  REQUIRE(ls->kind == json_mini::Value::Object);
  CHECK(ls->get("initial")->num == 1048576.0);
  CHECK(ls->get("final")->num < ls->get("initial")->num);
  const double skipped = ls->get("skipped_steps")->num, updates = ls->get("updates")->num;
  CHECK(skipped >= 1);
  CHECK(skipped < updates);                 // the scale came down far enough to step
  CHECK(updates == doc.get("steps")->num);  // one update per training step, skipped or not
  CHECK(has(checks_of(doc), "O10"));
  // scale.csv: a header and one row per update, the skipped ones marked.
  std::ifstream f(dir / "scale.csv");
  std::string line, header;
  std::getline(f, header);
  CHECK(header == "update,step,scale_before,scale_after,skipped");
  int rows = 0, marked = 0;
  while (std::getline(f, line)) {
    ++rows;
    if (line.size() > 2 && line.substr(line.size() - 2) == ",1") ++marked;
  }
  CHECK(rows == updates);
  CHECK(marked == skipped);
  fs::remove_all(dir);
}

TEST_CASE("train --precision fp16 with a loss scale of 1e-6: the gradients underflow and M28, M29, M30 warn") {
  testdata::require_fashion_mnist();
  const json_mini::Value doc = run_json("train --precision fp16 --loss-scale 0.000001" + kSmall);
  std::vector<std::string> warned;
  for (const json_mini::Value& f : doc.get("precision_checks")->arr)
    if (f.get("severity")->str == "warning") warned.push_back(f.get("check")->str);
  CHECK(has(warned, "M28"));  // every gradient value zero in float16
  CHECK(has(warned, "M29"));  // the first backward op whose gradient left the range at the bottom
  CHECK(has(warned, "M30"));  // the gradients lost against float32
  // The text names them too, one line each.
  const clitest::Run r = clitest::run_cli("train --precision fp16 --loss-scale 0.000001" +
                                              std::string(" --model mlp --epochs 1 --limit-train 640 --limit-test 300 "
                                                          "--threads 1 --quiet"),
                                          true);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("[M29 warning] the backward of") != std::string::npos);
  CHECK(r.out.find("loss scale 1e-06 -> ") != std::string::npos);
}

TEST_CASE("train --precision bf16 --master-weights: 16-bit parameters with float32 masters still learn") {
  testdata::require_fashion_mnist();
  const json_mini::Value doc = run_json("train --precision bf16 --master-weights" + kSmall);
  CHECK(doc.get("master_weights")->b == true);
  CHECK(doc.get("test_accuracy")->num > 0.3);
}

TEST_CASE("train: mixed-precision options that do not fit together are refused before any work") {
  const std::pair<const char*, const char*> bad[] = {
      {"train --precision fp8", "unknown --precision 'fp8'"},
      {"train --master-weights", "--master-weights needs 16-bit parameters"},
      {"train --precision bf16 --loss-scale 1024", "--loss-scale applies to --precision fp16"},
      {"train --precision fp16 --loss-scale 0", "--loss-scale"},
      {"train --no-precision-checks", "--no-precision-checks applies to --precision bf16|fp16"},
      {"train --check-every 10", "--check-every applies to --precision bf16|fp16"},
      {"train --precision bf16 --check-every 0", "--check-every"},
      {"train --precision bf16 --no-precision-checks --check-every 10", "keep one"},
      {"precision --dtype float32", "unknown --dtype 'float32'"},
      {"precision --model resnet", "unknown --model 'resnet'"},
  };
  for (const auto& [args, want] : bad) {
    CAPTURE(args);
    const clitest::Run r = clitest::run_cli_all(std::string(args) + " --data-dir /nonexistent");
    CHECK(r.status == 1);
    CHECK(r.out.find(want) != std::string::npos);
  }
}

TEST_CASE("precision: the per-op table against float32 names the op with the largest error") {
  testdata::require_fashion_mnist();
  for (const char* args : {"precision --model mlp --dtype bf16 --json",
                           "precision --model cnn --dtype fp16 "
                           "--batch-size 8 --json",
                           "precision --model mlp --dtype fp16 --weights --json"}) {
    CAPTURE(args);
    const json_mini::Value doc = run_json(args);
    const bool fp16 = std::string(args).find("fp16") != std::string::npos;
    CHECK(doc.get("dtype")->str == (fp16 ? "float16" : "bfloat16"));
    CHECK(doc.get("setting")->str ==
          (std::string(args).find("--weights") != std::string::npos ? "weights" : "autocast"));
    const json_mini::Value* ops = doc.get("ops");
    REQUIRE(ops != nullptr);
    REQUIRE(ops->arr.size() > 10);  // every forward op and backward gradient
    double largest = 0;
    bool some_backward = false, some16 = false;
    for (const json_mini::Value& o : ops->arr) {
      largest = std::max(largest, o.get("rel_error")->num);
      some_backward = some_backward || o.get("backward")->b;
      some16 = some16 || o.get("dtype")->str == doc.get("dtype")->str;  // (the loss's ops stay float32)
    }
    CHECK(some_backward);
    CHECK(some16);
    CHECK(largest > 0);  // 16 bits lose something somewhere
    const json_mini::Value* worst = doc.get("worst");
    REQUIRE(worst != nullptr);
    REQUIRE(worst->kind == json_mini::Value::Object);
    CHECK_FALSE(worst->get("op")->str.empty());
    CHECK(worst->get("rel_error")->num >= 0.9 * largest);
    const json_mini::Value* findings = doc.get("findings");
    REQUIRE(findings->arr.size() == 1);
    CHECK(findings->arr[0].get("check")->str == "M30");
    CHECK(findings->arr[0].get("op")->str == worst->get("op")->str);
  }
  // The table for people: worst first, the op named on its own line.
  const clitest::Run r = clitest::run_cli("precision --model mlp --dtype bf16 --rows 4", true);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("rel.error") != std::string::npos);
  CHECK(r.out.find("largest error: ") != std::string::npos);
}
