// Element types, devices and the dtype promotion rules.
#pragma once
#include <cstdint>
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
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
inline bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int64 || (include_bool && t == DType::Bool);
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// Promotion (docs/dtypes.md): the types form a chain bool < int64 < float32 < float64
// and a binary op computes in the higher of its operands' types:
//   int64 + float32 -> float32,  float32 + float64 -> float64,  bool + bool -> bool.
// A Python-style scalar (a C++ double/int64 passed to an op) does not promote a
// tensor of the same kind: float32 * 2.5 -> float32, int64 * 2 -> int64; but a
// floating scalar lifts an integral tensor to float32: int64 * 2.5 -> float32.
DType promote_types(DType a, DType b);

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

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
inline const Device kCPU{DeviceType::CPU, 0};
inline const Device kCUDA{DeviceType::CUDA, 0};
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace gradsleuth
