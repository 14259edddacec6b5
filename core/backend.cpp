// The table of registered backends, and op-name tables.
#include "core/backend.h"

#include "core/error.h"
#include "core/generator.h"

namespace gradsleuth {

namespace {
Backend* g_backends[2] = {nullptr, nullptr};
}

Backend& cpu_backend();  // cpu/memory.cpp

void register_backend(DeviceType type, Backend* backend) {
  check_device(Device(type), "register_backend");
  g_backends[static_cast<int>(type)] = backend;
}

bool has_backend(DeviceType type) {
  if (type != DeviceType::CPU && type != DeviceType::CUDA) return false;
  return type == DeviceType::CPU || g_backends[static_cast<int>(type)] != nullptr;
}

Backend& backend_for(Device d) {
  check_device(d, "device");
  if (d.type == DeviceType::CPU) return cpu_backend();
  Backend* b = g_backends[static_cast<int>(d.type)];
  GS_CHECK(b != nullptr, "device", "no backend for ", d.str(),
           ": this build of gradsleuth has no CUDA support, or the gradsleuth_cuda library is not linked. "
           "Rebuild with -DGRADSLEUTH_CUDA=ON on a machine with the CUDA toolkit, or keep tensors on the cpu.");
  return *b;
}

#define GS_OP_NAME(e, name) #name,
const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {GS_UNARY_OPS(GS_OP_NAME)};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(UnaryOp::kCount));
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {GS_BINARY_OPS(GS_OP_NAME)};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(BinaryOp::kCount));
  return names[static_cast<int>(op)];
}

const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {GS_REDUCE_OPS(GS_OP_NAME)};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(ReduceOp::kCount));
  return names[static_cast<int>(op)];
}
#undef GS_OP_NAME

// One default generator per thread: manual_seed(s) then sampling in one thread is
// never disturbed by another thread's draws, and two threads that seed alike draw
// alike (docs/autograd.md, "Thread safety"). Each thread's starts unseeded (0x5eed).
Generator& default_generator() {
  thread_local Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace gradsleuth
