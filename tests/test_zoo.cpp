// The bug zoo end to end on Fashion-MNIST (the quick budget): every catalogued
// bug is reproduced and caught by its intended check, and no check fires on the
// clean references (a false alarm is a defect like a missed bug).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include "debug/zoo/zoo.h"
#include "fashion_mnist_required.h"
#include "json_mini.h"
#include "reworded_test_util.h"

namespace zoo = gs::debug::zoo;
namespace nn = gs::nn;

namespace {
std::string fired_text(const zoo::RunResult& r) {
  std::string s;
  for (const auto& c : r.fired) s += c + " ";
  return s + "\n" + r.report.str(false);
}
}  // namespace

TEST_CASE("the clean references fire no check") {
  testdata::require_fashion_mnist();
  const zoo::Options o = zoo::Options::quick();
  const zoo::RunResult clean = zoo::run_variant({}, o);
  INFO(fired_text(clean));
  CHECK(clean.fired.empty());
  CHECK(clean.steps == o.steps);
  CHECK(clean.test_accuracy > 0.75);  // it learned: 150 steps on 6,000 images

  zoo::Options fo = o;
  fo.footwear = true;
  const zoo::RunResult foot = zoo::run_variant({}, fo);
  INFO(fired_text(foot));
  CHECK(foot.fired.empty());
  CHECK(foot.test_accuracy > 0.9);
}

TEST_CASE("the clean CNN fires no check either (gate, monitor, end-of-run diagnoses)") {
  testdata::require_fashion_mnist();
  zoo::Options o = zoo::Options::quick();
  o.model = "cnn";
  o.steps = 80;  // long enough to level off: at 40 steps its loss is still falling, which L9 rightly reports
  o.train_examples = 2000;
  o.test_examples = 500;
  const zoo::RunResult cnn = zoo::run_variant({}, o);
  INFO(fired_text(cnn));
  CHECK(cnn.fired.empty());
  CHECK(cnn.steps == 80);
  CHECK(cnn.test_accuracy > 0.6);
  // A bug still shows through the CNN recipe: the head's detach (B12) leaves the convolutions without gradient.
  const zoo::RunResult b12 = zoo::run_variant(nn::BugSet{nn::Bug::B12}, o);
  INFO(fired_text(b12));
  CHECK(b12.caught);
}

// Under the sanitizers (10-20x slower) the full catalog took past the 600 s test
// timeout: sanitizer builds run every fourth bug (B01, B05, B09, ...: a quarter of the catalog) with
// the same quick budget, so memory errors in every check path still get exercised.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kBugStride = 4;
#else
constexpr size_t kBugStride = 1;
#endif

TEST_CASE("every catalogued bug is caught by an intended check, and the diagnosis leads with it") {
  testdata::require_fashion_mnist();
  const zoo::Options o = zoo::Options::quick();
  const auto& catalog = nn::bug_catalog();
  zoo::Result all;  // what `gradsleuth zoo --json` writes, for the lead of each bug
  all.options = o;
  for (size_t i = 0; i < catalog.size(); i += kBugStride) {
    const nn::BugInfo& b = catalog[i];
    // The data-parallel bugs (recipe "dist", B29-B34) need several ranks: test_dist_zoo runs them
    // under mpirun; the single-process recipe has none of their code paths.
    if (std::find(b.recipes.begin(), b.recipes.end(), "dist") != b.recipes.end()) continue;
    const zoo::RunResult r = zoo::run_variant(nn::BugSet{b.id}, o);
    INFO(b.code << " (" << b.title << "): fired " << fired_text(r));
    CHECK(r.caught);
    std::vector<std::string> want = b.caught_by;
    std::sort(want.begin(), want.end());
    CHECK(r.intended == want);
    // Silent: training ran its budget (B02's backward error is the exception, and that error is M20).
    // Under a loss scaler every iteration runs, and the optimizer steps the scaler skipped are the
    // symptom (B37, B39, B40): the loop's iterations are counted.
    const bool scaled = zoo::precision_of(nn::BugSet{b.id}, o) == "float16" && b.id != nn::Bug::B35;
    if (scaled)
      CHECK(static_cast<int64_t>(r.history.step_losses.size()) == o.steps);
    else if (b.id != nn::Bug::B02)
      CHECK(r.steps == o.steps);
    // A finding speaks to a user debugging their own model: no catalogue ids ("bug B24") in what
    // it says went wrong, why, or what to do.
    const std::regex catalogue_id("\\bB[0-9][0-9]\\b");
    for (const gs::debug::Finding& f : r.report.findings()) {
      const std::string said = f.title + " " + f.cause + " " + f.fix;
      std::smatch m;
      const bool found = std::regex_search(said, m, catalogue_id);
      CHECK_MESSAGE(!found,
                    f.check << ": ..." << (found ? said.substr(m.position() > 60 ? m.position() - 60 : 0, 90) : ""));
    }
    // The diagnosis reads kinds, not words: every text reversed, the same chains and lead.
    reworded::check_diagnosis_ignores_words(r.report);
    all.bugs.push_back(r);
  }
  // The diagnosis: for every bug the lead of `zoo --json` is a confirmed cause, and its check is
  // one of the bug's intended checks (the root cause, not a symptom it set off).
  const json_mini::Value doc = json_mini::parse(zoo::json(all));
  REQUIRE(doc.get("bugs")->arr.size() == all.bugs.size());
  for (size_t i = 0; i < all.bugs.size(); ++i) {
    const json_mini::Value& b = doc.get("bugs")->arr[i];
    const json_mini::Value* lead = b.get("lead");
    INFO(all.bugs[i].id << ": " << all.bugs[i].report.str(false));
    REQUIRE(lead != nullptr);
    REQUIRE(lead->kind == json_mini::Value::Object);
    const std::string check = lead->get("check")->str;
    CHECK(std::find(all.bugs[i].intended.begin(), all.bugs[i].intended.end(), check) != all.bugs[i].intended.end());
    CHECK(lead->get("confirmed")->b);
    REQUIRE(lead->get("confirmed_by")->kind == json_mini::Value::Array);
    CHECK(lead->get("confirmed_by")->arr.front().str == check);
    CHECK(lead->get("ruled_out")->kind == json_mini::Value::Array);
    // The lead is the finding at "index", and nothing it explains is a root of its own.
    const size_t at = static_cast<size_t>(lead->get("index")->num);
    CHECK(b.get("findings")->arr[at].get("check")->str == check);
    CHECK(b.get("findings")->arr[at].get("caused_by")->kind == json_mini::Value::Null);
    for (const auto& e : lead->get("explains")->arr)
      CHECK(b.get("findings")->arr[static_cast<size_t>(e.num)].get("caused_by")->num == doctest::Approx(at));
  }
}

// The clean twins of the mixed-precision bugs: the references in float16 (autocast with a GradScaler,
// unscale_ then clipping), float16 on the footwear task (BCEWithLogitsLoss) and bfloat16 (parameters
// with float32 master weights) fire nothing; B35's own weighted loss with a GradScaler is silent too.
TEST_CASE("the mixed-precision clean references fire no check") {
  testdata::require_fashion_mnist();
  zoo::Options o = zoo::Options::quick();
  o.steps = 80;  // a smaller budget: the emulated 16-bit kernels cost more than float32's
  o.train_examples = 3000;
  for (const char* precision : {"float16", "bfloat16"}) {
    o.precision = precision;
    const zoo::RunResult r = zoo::run_variant({}, o);
    INFO(precision << ": " << fired_text(r));
    CHECK(r.fired.empty());
    // The whole budget, but for the steps a GradScaler skips: at its starting scale (2^16) a float16
    // gradient may overflow once early and that step is skipped, as designed (an AVX2 build, whose
    // products sum in another order, skipped one of 80 where an AVX-512 build skipped none). The
    // skips are read from the scaler's trace (none without a scaler).
    double skipped = 0;
    for (const auto& f : r.report.findings())
      if (const double v = f.value_of("skipped steps (inf/NaN gradient)"); std::isfinite(v)) skipped = v;
    CHECK(r.stopped.empty());
    CHECK(skipped <= 2);
    CHECK(static_cast<double>(r.steps) + skipped == static_cast<double>(o.steps));
    CHECK(r.test_accuracy > 0.7);
  }
  o.precision = "float16";
  o.footwear = true;
  const zoo::RunResult foot = zoo::run_variant({}, o);
  INFO(fired_text(foot));
  CHECK(foot.fired.empty());
  CHECK(foot.test_accuracy > 0.9);
  // B35 with the scaler it lacks: the same weighted loss, scaled, stays in float16's range.
  o.footwear = false;
  zoo::Variant v = zoo::build(nn::BugSet{nn::Bug::B35}, o);
  REQUIRE(v.scaler == nullptr);
  v.scaler = std::make_unique<gs::optim::GradScaler>();
  v.trainer.grad_scaler(v.scaler.get());
  const zoo::RunResult twin = zoo::run_variant(v, o);
  INFO(fired_text(twin));
  CHECK(twin.fired.empty());
  // A precision the recipe does not have, and two bugs that need different ones, are refused.
  o.precision = "float8";
  CHECK_THROWS_WITH_AS(zoo::precision_of({}, o), doctest::Contains("unknown precision 'float8'"), gs::Error);
  o.precision = "float32";
  CHECK_THROWS_WITH_AS(zoo::precision_of(nn::BugSet{nn::Bug::B35, nn::Bug::B38}, o),
                       doctest::Contains("different precisions"), gs::Error);
}

TEST_CASE("a data-parallel bug is refused by the single-process zoo, naming the command that runs it") {
  for (nn::Bug b : {nn::Bug::B29, nn::Bug::B34}) {
    try {
      zoo::build(nn::BugSet{b}, zoo::Options::quick());
      FAIL("zoo::build accepted a data-parallel bug");
    } catch (const gs::Error& e) {
      CHECK(std::string(e.what()).find("mpirun -np 2 gradsleuth zoo --distributed --bug") != std::string::npos);
    }
  }
}

TEST_CASE("a zoo on a device with no backend registered is refused before any work, naming the fix") {
  // This program does not link the CUDA backend, so nothing registered one.
  zoo::Options o = zoo::Options::quick();
  o.device = gs::kCUDA;
  o.data_dir = "/nonexistent";  // refused before the data is read
  try {
    zoo::build(nn::BugSet{nn::Bug::B22}, o);
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("cuda:0") != std::string::npos);
    CHECK(m.find("gradsleuth::cuda::init()") != std::string::npos);
  }
}

// Variants trained side by side (Options::jobs) give the results they give one after another: each
// keeps its warnings (M2 of B05), its observers (M19 of B01), its loss scaler (O10 of B36) and its
// random numbers to its own thread, and no check reads past a 16-bit gradient (B38's bfloat16
// weights: a read of other memory once flagged a finite step non-finite, and the probe that followed
// changed the training). Only the timings differ.
TEST_CASE("zoo::run with jobs = 2 gives the results of jobs = 1, in the same order") {
  testdata::require_fashion_mnist();
  zoo::Options o = zoo::Options::quick();
  o.steps = 60;
  o.train_examples = 2000;
  const std::vector<nn::Bug> bugs = {nn::Bug::B01, nn::Bug::B05, nn::Bug::B36, nn::Bug::B13, nn::Bug::B38};
  auto without_times = [](const zoo::Result& r) {
    return std::regex_replace(zoo::json(r), std::regex("\"seconds\":[^,}]*"), "\"seconds\":0");
  };
  o.jobs = 1;
  const zoo::Result one = zoo::run(bugs, o);
  o.jobs = 2;
  std::vector<size_t> done;
  const zoo::Result two = zoo::run(bugs, o, [&](const zoo::Progress& p) { done.push_back(p.done); });
  CHECK(done == std::vector<size_t>{1, 2, 3, 4, 5, 6, 7});  // clean, clean-footwear and the 5 bugs
  REQUIRE(two.bugs.size() == bugs.size());
  for (size_t i = 0; i < bugs.size(); ++i) {
    CHECK(two.bugs[i].id == nn::bug_code(bugs[i]));
    CHECK(two.bugs[i].caught);
  }
  CHECK(two.clean.fired.empty());
  CHECK(two.clean_footwear.fired.empty());
  CHECK(without_times(two) == without_times(one));
}
