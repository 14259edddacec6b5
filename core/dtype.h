// Element types, devices and the dtype promotion rules.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

namespace gradsleuth {

// Six element types. float32 is the default; float64 exists for gradient checking;
// int64 holds labels and indices; bool holds masks; float16 and bfloat16 are the 16-bit
// floats of mixed precision: stored in 16 bits, computed in float32 (docs/dtypes.md).
// The values are written in checkpoints: never renumber them.
enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3, Float16 = 4, BFloat16 = 5 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;

// The host type of a float16 / bfloat16 element: its 16 bits and nothing else (no
// arithmetic; compute in float). The constructors from float round to nearest, ties to even,
// overflow to +-inf and keep subnormals; to_float is exact (Eigen's conversions, defined in
// core/cpu/reduced_float.cpp).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};
float to_float(Half h);
float to_float(BFloat16 h);

const char* dtype_name(DType t);  // "float32", ...
size_t dtype_size(DType t);       // bytes per element
// Throws gradsleuth::Error naming `op` when `t` is not one of the six DTypes (a value cast
// from an out-of-range integer): the factories and conversions call it before allocating.
void check_dtype(DType t, const char* op);
// float16 and bfloat16: 16-bit storage, float32 arithmetic.
inline bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || is_reduced_float(t); }
inline bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int64 || (include_bool && t == DType::Bool);
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The dtype a floating C++ number (x * 2.5) computes in, and that true division and the
// floating unary ops (exp, log, ...) give integer inputs: PyTorch's default dtype.
inline constexpr DType kDefaultFloat = DType::Float32;

// Promotion (docs/dtypes.md), PyTorch's rules. Two layers:
//
// promote_types(a, b): the lattice of two tensor dtypes, bool < int64 < {float16, bfloat16}
// < float32 < float64 (int64 + float32 -> float32, float32 + float64 -> float64, bool + bool
// -> bool, int64 + float16 -> float16). float16 and bfloat16 are not ordered: neither holds
// the other's values, so float16 + bfloat16 -> float32, as in PyTorch.
//
// result_type(operands): the dtype an op computes in, decided from all its operands at once.
// Operands come in three tiers, highest first: tensors with at least one dim, 0-dim tensors,
// and C++ numbers (Scalar). Within each tier the dtypes are promoted; then a lower tier
// changes the result only when it is of a higher *category* (bool < integral < floating):
//   float32[3] + float64 0-dim -> float32      (same category: the dimensioned tensor wins)
//   int64[3]   + float32 0-dim -> float32      (a higher category wins even from a 0-dim)
//   int64[3]   * 2             -> int64,  int64[3] * 2.0 -> float32 (kDefaultFloat)
//   bool[3]    * 3             -> int64,  float32 0-dim + float64 0-dim -> float64
//   float16[3] * 2.5           -> float16 (a floating number does not widen a float16 tensor)
// Every op that combines operands decides its dtype with result_type (ops.h has the Tensor
// and Scalar overloads); promote_types is the pairwise step inside it.
DType promote_types(DType a, DType b);

// bool 0 < integral 1 < floating 2: the categories of result_type and can_cast.
inline int dtype_category(DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; }

enum class PromotionTier : uint8_t { Number = 0, ZeroDim = 1, Dimensioned = 2 };
struct PromotionOperand {
  DType dtype;  // for a Number: bool, int64 or float64 (a floating number counts as kDefaultFloat)
  PromotionTier tier;
};
// (A pointer and a count, not std::span: nvcc compiles this header as C++17.)
DType result_type(const PromotionOperand* operands, size_t n);
inline DType result_type(std::initializer_list<PromotionOperand> operands) {
  return result_type(operands.begin(), operands.size());
}

// Whether an op's result of dtype `from` may be written into a tensor of dtype `to` (in-place
// ops, PyTorch's canCast): never down a category (floating -> integral, integral -> bool);
// within one (float64 -> float32) it may.
inline bool can_cast(DType from, DType to) { return dtype_category(from) <= dtype_category(to); }

// C++ type <-> DType.
template <class T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Throws the internal error of a kernel reached by a float16/bfloat16 tensor that has no
// loop for it (the CPU backend converts them to float32 before its kernels run).
[[noreturn]] void dispatch_reduced_float(DType t);

// Calls f(T{}) with T the C++ type of `t`: the one place dtypes meet templates. Only the four
// computing dtypes: float16 and bfloat16 are stored, not computed in (dispatch_reduced_float).
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::Int64: return f(int64_t{});
    case DType::Float32: return f(float{});
    case DType::Float16:
    case DType::BFloat16: dispatch_reduced_float(t);
    case DType::Float64: break;
  }
  return f(double{});
}

// Devices: every tensor lives on one. CUDA exists only when built with it.
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}
  explicit Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};
// Throws gradsleuth::Error naming `op` when `d` is not a device this enum knows (a type
// cast from an out-of-range integer) or has a negative index.
void check_device(const Device& d, const char* op);
inline const Device kCPU{DeviceType::CPU, 0};
inline const Device kCUDA{DeviceType::CUDA, 0};
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace gradsleuth
