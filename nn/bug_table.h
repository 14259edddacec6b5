// The silent-bug catalog as one table: every other list of bugs (the Bug enum, its
// codes, parse_bug, bug_catalog(), the zoo's default run, the count in messages) is
// generated from it, so adding a bug is one row here plus its buggy code path
// (docs/catalog.md, "Adding a bug", walks through one).
//
// X(ID, title, where to switch it on, intended checks, recipes that reproduce it)
//   ID       B<nn>, numbered in order with no gaps (tests/test_nn_bugs.cpp checks it)
//   checks   space-separated check ids (gradsleuth checks --list)
//   recipes  the zoo's models that can reproduce it: "mlp cnn", or "mlp" where the
//            CNN lacks the layer the bug lives in; "dist" for the data-parallel bugs,
//            which only `gradsleuth zoo --distributed` (under mpirun) reproduces
#pragma once

#define GS_BUG_TABLE(X)                                                                                              \
  X(B01, "regression target (B,) against prediction (B,1) broadcasts to (B,B)", "nn::MSELoss", "M19 D6", "mlp cnn")  \
  X(B02, "in-place op on a tensor saved for backward", "nn::Residual", "M20", "mlp")                                 \
  X(B03, "loss reduced with sum instead of mean", "nn::Loss (any)", "L6", "mlp cnn")                                 \
  X(B04, "optimizer gradients never zeroed", "optim::Trainer", "O5", "mlp cnn")                                      \
  X(B05, "validation run in training mode (dropout on)", "optim::Trainer", "M2", "mlp cnn")                          \
  X(B06, "normalisation statistics fitted on train + test", "data pipeline", "D7", "mlp cnn")                        \
  X(B07, "inputs shuffled without their labels", "nn::DataLoader", "D4", "mlp cnn")                                  \
  X(B08, "softmax before cross-entropy", "model (recipe)", "L2", "mlp cnn")                                          \
  X(B09, "BCE fed raw logits", "nn::BCELoss", "L3", "mlp cnn")                                                       \
  X(B10, "ReLU after the final layer", "model (recipe)", "M3", "mlp cnn")                                            \
  X(B11, "one layer instance reused where two were meant", "model (recipe)", "M4", "mlp")                            \
  X(B12, "detach inside the model", "nn::Linear", "M5", "mlp cnn")                                                   \
  X(B13, "reshape where a transpose was meant (batch mixing)", "nn::Linear", "M6", "mlp cnn")                        \
  X(B14, "softmax / mean over the wrong dimension", "nn::LogSoftmax", "M6 M19", "mlp cnn")                           \
  X(B15, "wrong parameters frozen", "model (recipe)", "M10 M5", "mlp cnn")                                           \
  X(B16, "weights initialised far too large", "nn::Linear", "M9 O1", "mlp cnn")                                      \
  X(B17, "deep sigmoid stack, vanishing gradients", "model (recipe)", "O1 M8", "mlp")                                \
  X(B18, "dying ReLUs (large negative bias)", "nn::Linear", "M7", "mlp cnn")                                         \
  X(B19, "every label masked (ignore_index)", "nn::DataLoader", "L5", "mlp cnn")                                     \
  X(B20, "log(softmax(x)) instead of log-sum-exp", "nn::LogSoftmax", "M12 W4", "mlp cnn")                            \
  X(B21, "half-precision softmax overflow", "nn::LogSoftmax", "M18", "mlp cnn")                                      \
  X(B22, "a layer with a wrong backward", "nn::Linear", "M13", "mlp cnn")                                            \
  X(B23, "BatchNorm without running statistics", "nn::BatchNorm1d/2d", "M17", "mlp")                                 \
  X(B24, "learning rate far too high", "recipe (optimizer)", "L1 O6 O8", "mlp cnn")                                  \
  X(B25, "raw 0..255 inputs", "data pipeline", "D5", "mlp cnn")                                                      \
  X(B26, "labels 1-indexed / out of range", "data pipeline", "D9", "mlp cnn")                                        \
  X(B27, "float64 inputs into a float32 model", "data pipeline", "M11", "mlp cnn")                                   \
  X(B28, "no shuffling, batches sorted by class", "nn::DataLoader", "D8", "mlp cnn")                                 \
  X(B29, "gradients summed across ranks instead of averaged", "dist::DistributedDataParallel", "O7 W9", "dist")      \
  X(B30, "no initial broadcast: ranks start from different weights", "dist::DistributedDataParallel", "M21", "dist") \
  X(B31, "every rank reads the same data", "dist::DistributedSampler", "D11", "dist")                                \
  X(B32, "the same dropout seed on every rank", "recipe (per-rank seeding)", "M22", "dist")                          \
  X(B33, "a parameter left out of the all-reduce", "dist::DistributedDataParallel", "O7 M21", "dist")                \
  X(B34, "one rank's loss logged as the global loss", "recipe (metric logging)", "L8", "dist")                       \
  X(B35, "float16 autocast without loss scaling (gradients underflow)", "recipe (mixed precision)", "M28", "mlp")    \
  X(B36, "gradients clipped before the loss scaler's unscale_", "optim::Trainer", "O10", "mlp")                      \
  X(B37, "a hand-written softmax run in float16 (autocast bypassed)", "model (recipe)", "M18 M12 W4", "mlp")         \
  X(B38, "bfloat16 weights updated without float32 master weights", "recipe (optimizer)", "M28", "mlp")              \
  X(B39, "an inf gradient at every step: the loss scale collapses", "recipe (loss)", "O10 W4", "mlp")                \
  X(B40, "BCE on float16 sigmoid outputs (autocast worked around)", "recipe (loss)", "L3", "mlp")
