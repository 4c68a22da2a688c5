#include "autograd/ops/cast.h"

namespace hyb {

Tensor cast_forward(const Tensor& x, DType dtype) {
  HYB_CHECK(x.defined(), "cast: undefined input");
  HYB_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: ", x.str(), " to ", dtype_name(dtype),
            "; the differentiable cast is between floating dtypes (f32, f64, bf16)");
  return x.to(dtype);
}

Tensor cast_backward(const Tensor& dy, DType x_dtype) { return dy.to(x_dtype); }

Var cast(const Var& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return record_op1("cast", {x}, cast_forward(x.data(), dtype),
                    [x_dtype = x.dtype()](const Tensor& dy, GradMask) { return Grads{cast_backward(dy, x_dtype)}; });
}

}  // namespace hyb
