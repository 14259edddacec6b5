// The command table of the gradsleuth tool: one row per subcommand (cli/cmd_*.cpp).
#include "cli/cli.h"

namespace gradsleuth::cli {

std::vector<Command> all_commands() {
  return {
      {"checks", "list the debug module's checks: id, name, C++ entry point, sources (docs/checks.md)", cmd_checks},
      {"corpus", "run the healthy-practice corpus: correct training programs on which no check may warn", cmd_corpus},
      {"doctor", "run every check on a model (optionally with injected bugs) and write an HTML report", cmd_doctor},
      {"demo", "train a small MLP on a spiral with raw ops, then show an in-place error and a gradient check",
       cmd_demo},
      {"devices", "list the CUDA devices this build sees (or why none), and whether the CPU emulator is built",
       cmd_devices},
      {"explore", "one HTML page to explore the autograd graph, step through backward and replay a training run",
       cmd_explore},
      {"graph", "draw the autograd graph of the zoo's model (SVG with Graphviz, else DOT), findings in red", cmd_graph},
      {"gradcheck", "check every op's backward against central differences (M13 numeric gradient check)",
       cmd_gradcheck},
      {"kernels", "the kernel workbench: numbered CUDA kernel versions, validated (emulator) or timed (GPU)",
       cmd_kernels},
      {"lab", "list the course labs (tutorials/) and grade your code for one: gradsleuth lab check N", cmd_lab},
      {"mutate", "fault operators (DeepCrime's and the program-text families) over the corpus: list, or run one",
       cmd_mutate},
      {"ops", "list the op registry (name, category, differentiable, double backward)", cmd_ops},
      {"precision", "M30 on train's mlp or cnn: one batch in bf16/fp16 against float32, op by op, the worst named",
       cmd_precision},
      {"scorecard", "every fault operator on the corpus's recipes: detection and diagnosis recall, false alarms",
       cmd_scorecard},
      {"train", "train an MLP or a CNN on Fashion-MNIST and report test accuracy (docs/training.md)", cmd_train},
      {"version", "this build: version, git commit, build type, ISA level, BLAS, CUDA mode, MPI (also --version)",
       cmd_version},
      {"zoo", "train the clean model and each catalogued bug with every check attached: the detection matrix", cmd_zoo},
  };
}

}  // namespace gradsleuth::cli
