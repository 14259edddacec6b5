// gradsleuth: one include for the whole library.
//
//   #include <gradsleuth.h>
//   auto x = gs::randn({64, 784});
//   auto w = gs::randn({784, 10}, gs::requires_grad());
//   auto loss = gs::log_softmax(x.matmul(w), 1).mean();
//   loss.backward();   // w.grad() now holds d(loss)/dw
#pragma once
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fast_kernels.h"
#include "core/generator.h"
#include "core/io.h"
#include "core/observer.h"
#include "core/op_registry.h"
#include "core/ops.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "core/warning.h"
#if __has_include("nn/nn.h")
#include "nn/nn.h"
#endif
#if __has_include("optim/optim.h")
#include "optim/optim.h"
#endif
// The debug module, whole: the checks of docs/checks.md, the gate and the monitor, and
// debug::diagnose / debug::Session, which run them on your own model, loss, optimizer and data.
// (No debug/debug.h: that name would collide with libstdc++'s own debug/ headers.)
#if __has_include("debug/run/diagnose.h")
#include "debug/checks/data/data_checks.h"
#include "debug/checks/hooks.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/gradcheck.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/precision.h"
#include "debug/checks/model/range_watch.h"
#include "debug/checks/optim/loss_scale.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/workflow/memory.h"
#include "debug/checks/workflow/profiler.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/catalogue.h"
#include "debug/evidence/finding.h"
#include "debug/evidence/tensor_stats.h"
#include "debug/report/graph.h"
#include "debug/report/html_report.h"
#include "debug/run/diagnose.h"
#include "debug/run/monitor.h"
#include "debug/zoo/zoo.h"
#elif __has_include("debug/checks/model/gradcheck.h")
#include "debug/checks/model/gradcheck.h"
#endif
