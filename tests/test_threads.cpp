// Tests of what docs/autograd.md ("Thread safety") promises: the default generator
// is per thread (manual_seed + model construction in two threads reproduces the
// sequential result), backward passes in several threads on separate graphs are
// correct, and so are those through shared leaves (each thread's gradient added), and observers and warning handlers can be scoped to the thread that attached them. The
// TSan job (./test.sh --tsan) runs this file with -fsanitize=thread.
#include <doctest/doctest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/ops.h"
#include "core/warning.h"
#include "nn/nn.h"

namespace nn = gs::nn;
using gs::Tensor;

namespace {

// The weights of a small MLP built right after manual_seed(seed), flattened.
std::vector<float> build_weights(uint64_t seed) {
  gs::manual_seed(seed);
  nn::Sequential m{std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(),
                   std::make_shared<nn::Linear>(32, 4)};
  std::vector<float> out;
  for (const Tensor& p : m.parameters()) {
    const auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  // A dropout mask and a randn draw after construction, from the same stream.
  const auto r = gs::randn({8}).to_vector<float>();
  out.insert(out.end(), r.begin(), r.end());
  return out;
}

// Runs body(t) for t < threads, each on its own thread, all started together; returns when all end.
template <class F>
void run_together(int threads, F&& body) {
  std::barrier sync(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      sync.arrive_and_wait();
      body(t);
    });
  for (auto& th : ts) th.join();
}

struct CountingObserver : gs::OpObserver {
  std::atomic<int> ops{0};
  void on_op(const gs::OpEvent&) override { ops.fetch_add(1, std::memory_order_relaxed); }
};

}  // namespace

TEST_CASE("manual_seed + model construction in two threads reproduces the sequential result") {
  const std::vector<float> a = build_weights(11), b = build_weights(22);
  REQUIRE(a != b);
  for (int round = 0; round < 5; ++round) {
    std::vector<float> ta, tb;
    std::barrier sync(2);
    std::thread t1([&] {
      sync.arrive_and_wait();  // both threads seed and draw at the same time
      for (int k = 0; k < 3; ++k) ta = build_weights(11);
    });
    std::thread t2([&] {
      sync.arrive_and_wait();
      for (int k = 0; k < 3; ++k) tb = build_weights(22);
    });
    t1.join();
    t2.join();
    CHECK(ta == a);
    CHECK(tb == b);
  }
  // The main thread's generator is its own: seeding a worker leaves it alone.
  gs::manual_seed(5);
  const float before = gs::rand({1}).item<float>();
  gs::manual_seed(5);
  std::thread([] {
    gs::manual_seed(999);
    (void)gs::rand({100});
  }).join();
  CHECK(gs::rand({1}).item<float>() == before);
}

TEST_CASE("backward in several threads at once, on separate graphs, gives each thread's exact gradients") {
  constexpr int kThreads = 4, kIters = 200;
  std::vector<int> wrong(kThreads, 0);
  run_together(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) {
      const double c = t + 1 + i % 3;
      Tensor x = gs::full({3}, c, gs::kFloat64).requires_grad_(true);
      // y = sum(x^2 * c): dy/dx = 2 c x = 2 c^2
      Tensor y = (x * x * c).sum();
      y.backward();
      for (double g : x.grad().to_vector<double>()) wrong[t] += g != 2 * c * c;
    }
  });
  for (int t = 0; t < kThreads; ++t) CHECK(wrong[t] == 0);
}

TEST_CASE("backward in several threads through shared parameters adds every thread's gradient") {
  // Hogwild-style: the threads' graphs share the leaves (a Linear's weight and bias). Every
  // gradient is a small integer, so the sums are exact in float64 whatever the order.
  constexpr int kThreads = 4, kRounds = 40, kIters = 25;
  for (int round = 0; round < kRounds; ++round) {
    gs::manual_seed(round);
    auto lin = std::make_shared<nn::Linear>(3, 2);
    lin->to(gs::kFloat64);
    // Fresh parameters each round: their gradient accumulators are made by the threads at once.
    Tensor w = lin->weight, b = lin->bias;
    run_together(kThreads, [&](int t) {
      for (int i = 0; i < kIters; ++i) {
        // x = c * ones(1, 3): dL/dW = c (every element), dL/db = 1 for L = sum(lin(x)).
        const double c = t + 1 + i % 3;
        (*lin)(gs::full({1, 3}, c, gs::kFloat64)).sum().backward();
      }
    });
    double c_sum = 0;
    for (int t = 0; t < kThreads; ++t)
      for (int i = 0; i < kIters; ++i) c_sum += t + 1 + i % 3;
    REQUIRE(w.grad().defined());
    for (double g : w.grad().to_vector<double>()) CHECK(g == c_sum);
    for (double g : b.grad().to_vector<double>()) CHECK(g == kThreads * kIters);
  }
}

TEST_CASE("an observer scoped to its thread counts only that thread's ops") {
  CountingObserver mine, everyone;
  std::barrier sync(2);
  std::atomic<bool> other_done{false};
  std::thread other([&] {
    sync.arrive_and_wait();  // the observers are attached
    Tensor x = gs::ones({4});
    for (int i = 0; i < 50; ++i) x = x + 1.0;
    other_done = true;
    sync.arrive_and_wait();
  });
  int own_ops = 0;
  {
    gs::ObserverGuard g1(&mine, gs::ObserverScope::ThisThread);
    gs::ObserverGuard g2(&everyone);
    sync.arrive_and_wait();
    Tensor y = gs::ones({4});
    for (int i = 0; i < 7; ++i) y = y * 2.0;
    sync.arrive_and_wait();  // the other thread has finished its ops
    own_ops = mine.ops.load();
    CHECK(other_done.load());
  }
  other.join();
  CHECK(own_ops >= 7);
  CHECK(own_ops < 50);  // none of the other thread's ops
  CHECK(everyone.ops.load() >= own_ops + 50);
}

TEST_CASE("attaching and detaching observers while other threads run ops") {
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    Tensor x = gs::ones({8});
    while (!stop.load()) x = (x + 1.0) * 0.5;
  });
  for (int i = 0; i < 200; ++i) {
    CountingObserver c;
    gs::ObserverGuard g(&c);
    (void)(gs::ones({2}) + 1.0);
  }
  stop = true;
  worker.join();
  CHECK(gs::observers_active() == false);
}

TEST_CASE("a warning handler scoped to its thread takes that thread's warnings only; the others go on") {
  std::vector<std::string> process_wide, mine, other_thread;
  gs::WarningHandlerGuard all([&](const gs::Warning& w) { process_wide.push_back(w.where); });
  {
    gs::WarningHandlerGuard own([&](const gs::Warning& w) { mine.push_back(w.where); }, gs::WarningScope::ThisThread);
    std::thread other([&] {
      gs::warn({"O5", "other thread", "a warning raised on another thread"});
      {
        gs::WarningHandlerGuard g([&](const gs::Warning& w) { other_thread.push_back(w.where); },
                                  gs::WarningScope::ThisThread);
        gs::warn({"M2", "other thread, its own handler", "taken by that thread's handler"});
      }
    });
    other.join();
    gs::warn({"O5", "this thread", "taken by this thread's handler"});
  }
  gs::warn({"O5", "this thread, after", "the thread's handler is gone: the process-wide one"});
  CHECK(mine == std::vector<std::string>{"this thread"});
  CHECK(other_thread == std::vector<std::string>{"other thread, its own handler"});
  CHECK(process_wide == std::vector<std::string>{"other thread", "this thread, after"});
}
