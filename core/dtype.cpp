// dtype names, sizes, promotion; device parsing.
#include "core/dtype.h"

#include "core/error.h"

namespace gradsleuth {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: return sizeof(bool);
    case DType::Int64: return sizeof(int64_t);
    case DType::Float32: return sizeof(float);
    case DType::Float64: return sizeof(double);
  }
  return 0;
}

// The chain bool < int64 < float32 < float64: the enum values are in that order.
DType promote_types(DType a, DType b) { return a > b ? a : b; }

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
  } else if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() > 4) {
      GS_CHECK(spec[4] == ':' && spec.size() > 5, "Device", "cannot parse '", spec, "'; expected cpu, cuda or cuda:N");
      index = std::stoi(spec.substr(5));
    }
  } else {
    GS_FAIL("Device", "unknown device '", spec, "'; expected cpu, cuda or cuda:N");
  }
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace gradsleuth
