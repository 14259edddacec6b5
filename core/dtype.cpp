// dtype names, sizes, promotion (result_type), Scalar; device parsing.
#include "core/dtype.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>

#include "core/error.h"
#include "core/scalar.h"

namespace gradsleuth {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: return sizeof(bool);
    case DType::Int64: return sizeof(int64_t);
    case DType::Float32: return sizeof(float);
    case DType::Float64: return sizeof(double);
    case DType::Float16:
    case DType::BFloat16: return 2;
  }
  return 0;
}

void check_dtype(DType t, const char* op) {
  GS_CHECK(static_cast<int>(t) <= static_cast<int>(DType::BFloat16), op, "dtype value ", static_cast<int>(t),
           " is not a gradsleuth DType (bool 0, int64 1, float32 2, float64 3, float16 4, bfloat16 5); "
           "pass one of gs::kBool, gs::kInt64, gs::kFloat32, gs::kFloat64, gs::kFloat16, gs::kBFloat16");
}

void dispatch_reduced_float(DType t) {
  GS_FAIL("dispatch_dtype", "internal error: a kernel without a ", dtype_name(t), " loop was given a ", dtype_name(t),
          " tensor (the CPU backend computes 16-bit floats in float32 before its kernels run); "
          "convert the tensor with .to(gs::kFloat32) first");
}

void check_device(const Device& d, const char* op) {
  GS_CHECK(d.type == DeviceType::CPU || d.type == DeviceType::CUDA, op, "device type value ", static_cast<int>(d.type),
           " is not a gradsleuth DeviceType (cpu 0, cuda 1); pass gs::kCPU, gs::kCUDA or gs::Device(\"cuda:0\")");
  GS_CHECK(d.index >= 0, op, "device index ", d.index, " is negative; devices count from 0 (cuda:0)");
}

// bool < int64 < {float16, bfloat16} < float32 < float64; float16 + bfloat16 -> float32.
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::Int64: return 1;
      case DType::Float16:
      case DType::BFloat16: return 2;
      case DType::Float32: return 3;
      case DType::Float64: break;
    }
    return 4;
  };
  const int ra = rank(a), rb = rank(b);
  if (ra == rb) return DType::Float32;  // float16 with bfloat16: the smallest dtype holding both
  return ra > rb ? a : b;
}

// PyTorch's ResultTypeState: promote within each tier, then let each lower tier in only
// where it brings a higher category (combine_categories). The tiers exist so that a
// 0-dim tensor or a literal does not silently widen a whole tensor: float32 weights times
// a float64 0-dim learning rate stay float32, as they would in PyTorch.
DType result_type(const PromotionOperand* operands, size_t n) {
  GS_CHECK(n > 0, "result_type", "needs at least one operand");
  std::optional<DType> tier[3];
  for (size_t k = 0; k < n; ++k) {
    const PromotionOperand& o = operands[k];
    DType t = o.dtype;
    if (o.tier == PromotionTier::Number && is_floating(t)) t = kDefaultFloat;
    auto& r = tier[static_cast<int>(o.tier)];
    r = r ? promote_types(*r, t) : t;
  }
  std::optional<DType> result;
  for (const auto& higher : tier) {  // Number, ZeroDim, Dimensioned: each tier outranks the last
    if (!higher) continue;
    result = result && dtype_category(*result) > dtype_category(*higher) ? promote_types(*higher, *result) : *higher;
  }
  return *result;
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return os << (s.to_bool() ? "true" : "false");
    case Scalar::Kind::Integral: return os << s.to_int64();
    case Scalar::Kind::Floating: break;
  }
  // The shortest text that reads back as the same double (0.1, not 0.10000000000000001).
  const double d = s.to_double();
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, d).ptr;
  std::string txt(buf, end);
  if (std::isfinite(d) && txt.find_first_of(".e") == std::string::npos) txt += ".0";
  return os << txt;
}

void check_scalar_fits(const Scalar& value, DType dtype, const char* op) {
  if (dtype == kFloat64 || (!value.is_floating() && !is_reduced_float(dtype))) {
    if (dtype != kBool || value.is_bool()) return;
  }
  const double d = value.to_double();
  switch (dtype) {
    case DType::Bool:
      GS_CHECK(d == 0.0 || d == 1.0, op, "the value ", value,
               " cannot be stored in a bool tensor: only 0, 1, "
               "true and false can. Use a comparison (x != 0) for a mask, or an int64 tensor for counts.");
      return;
    case DType::Int64:
      // 2^63 is exact in double; the range of int64 is [-2^63, 2^63).
      GS_CHECK(std::isfinite(d) && d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0, op,
               "the value ", value, " cannot be stored in an int64 tensor without changing it",
               std::isfinite(d) ? (d == std::trunc(d) ? " (out of range)" : " (it has a fractional part)")
                                : " (int64 has no NaN or infinity)",
               ". Store it in a floating tensor (gs::kFloat32; x.to(gs::kFloat32) for an existing one), or pass a "
               "whole number.");
      return;
    case DType::Float32:
      GS_CHECK(!std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max(), op, "the value ", value,
               " overflows float32 (largest finite ", std::numeric_limits<float>::max(),
               "); use a float64 "
               "tensor or pass inf explicitly if that is what you mean");
      return;
    case DType::Float16:
    case DType::BFloat16: {
      // An error only when the value would round to infinity (beyond the largest finite value
      // by half a unit or more); an ordinary number just rounds, as it does into float32.
      const float r =
          dtype == kFloat16 ? to_float(Half(static_cast<float>(d))) : to_float(BFloat16(static_cast<float>(d)));
      GS_CHECK(!std::isfinite(d) || std::isfinite(r), op, "the value ", value, " overflows ", dtype_name(dtype),
               " (largest finite ", dtype == kFloat16 ? "65504" : "3.38953e+38",
               "); use a float32 tensor or pass inf explicitly if that is what you mean");
      return;
    }
    case DType::Float64: return;
  }
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
  } else if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() > 4) {
      GS_CHECK(spec[4] == ':' && spec.size() > 5, "Device", "cannot parse '", spec, "'; expected cpu, cuda or cuda:N");
      const std::string digits = spec.substr(5);
      int n = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      GS_CHECK(ec == std::errc() && end == digits.data() + digits.size() && n >= 0, "Device", "cannot parse '", spec,
               "': the index after 'cuda:' must be a number from 0, e.g. cuda:0");
      index = n;
    }
  } else {
    GS_FAIL("Device", "unknown device '", spec, "'; expected cpu, cuda or cuda:N");
  }
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace gradsleuth
