// Lab 10 starter code: data-parallel training and its silent bugs.
// Replace each `throw` marked TODO with your code (README.md, Tasks 10.1-10.4),
// rebuild and grade:   mpirun -np 2 build/tutorials/lab10_grader check 10
// (Task 10.1 also grades alone: ./run.sh lab check 10.)
#include "tutorials/lab10_dist/lab10.h"

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/dist/dist_checks.h"

namespace gradsleuth::lab10 {

// TODO(lab 10, task 1): check the arguments (GS_CHECK(cond, "shard_indices", "message ...")),
// then: Generator g(seed + epoch); Tensor perm = randperm(n, &g) (int64; perm[i].item<int64_t>()
// or perm.to_vector<int64_t>()); total = ceil(n / world_size) * world_size; append perm[0],
// perm[1], ... until the list has `total` entries; return the entries at positions rank,
// rank + world_size, ...
std::vector<int64_t> shard_indices(int64_t n, int rank, int world_size, uint64_t seed, int64_t epoch) {
  throw Error("lab 10", "not implemented: lab 10 task 1 (shard_indices in tutorials/lab10_dist/lab10.cpp)");
}

// TODO(lab 10, task 2): for each (name, p) of model.named_parameters() with p.requires_grad()
// and p.grad().defined(): Tensor g = p.grad().clone(); pg.all_reduce(g, dist::ReduceOp::Sum);
// p.set_grad(g / world size). Do it under NoGradGuard. Every rank must reduce the same
// parameters in the same order (the all-reduces are matched by order).
void average_gradients(nn::Module& model, dist::ProcessGroup& pg) {
  throw Error("lab 10", "not implemented: lab 10 task 2 (average_gradients in tutorials/lab10_dist/lab10.cpp)");
}

// TODO(lab 10, task 3): gather a std::vector<double> from every rank with one
// pg.all_gather(tensor(v, {n}, kFloat64)): the result is (world_size, n), row r is rank r's.
// M21: debug::check_params_in_sync(debug::trainable_names(model), rows of the gathered
// debug::fingerprint_params(model), step). M22: debug::check_rank_randomness(rows of the
// gathered debug::randomness_fingerprint(), random_layers, step), where random_layers is true
// when the model is in training mode and has a Dropout (a module whose type_name() is
// "Dropout", anywhere under it: walk named_children()). Return both checks' findings.
std::vector<debug::Finding> check_replicas(const nn::Module& model, dist::ProcessGroup& pg, int64_t step) {
  throw Error("lab 10", "not implemented: lab 10 task 3 (check_replicas in tutorials/lab10_dist/lab10.cpp)");
}

// TODO(lab 10, task 4): read the findings the report shows for mystery A and mystery B (grade
// Task 10.3 first), find the bugs in docs/catalog.md, and return their ids.
std::vector<std::string> mystery_bugs() {
  throw Error("lab 10", "not implemented: lab 10 task 4 (mystery_bugs in tutorials/lab10_dist/lab10.cpp)");
}

}  // namespace gradsleuth::lab10
