// Element types, devices and the dtype promotion rules.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

namespace gradsleuth {

// Four element types. float32 is the default; float64 exists for gradient checking;
// int64 holds labels and indices; bool holds masks.
enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;

const char* dtype_name(DType t);  // "float32", ...
size_t dtype_size(DType t);       // bytes per element
// Throws gradsleuth::Error naming `op` when `t` is not one of the four DTypes (a value cast
// from an out-of-range integer): the factories and conversions call it before allocating.
void check_dtype(DType t, const char* op);
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
inline bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int64 || (include_bool && t == DType::Bool);
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// The dtype a floating C++ number (x * 2.5) computes in, and that true division and the
// floating unary ops (exp, log, ...) give integer inputs: PyTorch's default dtype.
inline constexpr DType kDefaultFloat = DType::Float32;

// Promotion (docs/dtypes.md), PyTorch's rules. Two layers:
//
// promote_types(a, b): the lattice of two tensor dtypes, the chain bool < int64 < float32
// < float64 (int64 + float32 -> float32, float32 + float64 -> float64, bool + bool -> bool).
//
// result_type(operands): the dtype an op computes in, decided from all its operands at once.
// Operands come in three tiers, highest first: tensors with at least one dim, 0-dim tensors,
// and C++ numbers (Scalar). Within each tier the dtypes are promoted; then a lower tier
// changes the result only when it is of a higher *category* (bool < integral < floating):
//   float32[3] + float64 0-dim -> float32      (same category: the dimensioned tensor wins)
//   int64[3]   + float32 0-dim -> float32      (a higher category wins even from a 0-dim)
//   int64[3]   * 2             -> int64,  int64[3] * 2.0 -> float32 (kDefaultFloat)
//   bool[3]    * 3             -> int64,  float32 0-dim + float64 0-dim -> float64
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
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of `t`: the one place dtypes meet templates.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::Int64: return f(int64_t{});
    case DType::Float32: return f(float{});
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
