#include "core/dtype.h"

#include "core/error.h"

namespace hyb {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u16: return 2;
  }
  HYB_ASSERT(false, "bad dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u16: return "u16";
  }
  HYB_ASSERT(false, "bad dtype ", int(t));
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u16: return "U16";
  }
  HYB_ASSERT(false, "bad dtype ", int(t));
}

bool dtype_from_safetensors_name(std::string_view s, DType* out) {
  static const std::pair<std::string_view, DType> table[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"BF16", DType::bf16},
      {"I32", DType::i32}, {"I64", DType::i64}, {"U16", DType::u16}};
  for (const auto& [name, t] : table)
    if (name == s) {
      *out = t;
      return true;
    }
  return false;
}

}  // namespace hyb
