// Tensor: a typed, strided view of reference-counted Storage on one device. No gradients here
// (autograd/var.h adds them). Views (reshape of contiguous data, transpose, permute, slice, narrow)
// share storage; contiguous() and clone() copy. Shapes are outer to inner, strides in elements.
//   Tensor x = Tensor::empty({2, 3}, DType::f32);          // cpu
//   Tensor xt = x.transpose(0, 1).contiguous();            // (3, 2), a copy
//   float* p = xt.data<float>();
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace hyb {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // Wraps memory that something else owns (a mapped file); keep_alive is released with the tensor.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep_alive);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return defined_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const { return shape_[wrap_dim(d)]; }
  int64_t stride(int64_t d) const { return strides_[wrap_dim(d)]; }
  int64_t numel() const { return numel_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : device_; }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool same_storage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to the first element (storage base + offset).
  void* raw_data() const;
  template <typename T>
  T* data() const {
    HYB_CHECK(dtype_ == dtype_of<T>(), "tensor of dtype ", dtype_name(dtype_), " accessed as ",
              dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }

  // In-place write tracking (see Storage::version).
  uint64_t version() const { return storage_ ? storage_->version.load() : 0; }
  void bump_version() const {
    if (storage_) ++storage_->version;
  }

  // Views.
  Tensor view(const Shape& shape) const;      // contiguous only; one dim may be -1
  Tensor reshape(const Shape& shape) const;   // view when possible, else a contiguous copy
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device d) const;
  Tensor to(DType t) const;
  void copy_(const Tensor& src) const;  // same shape; any strides, dtypes and devices
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }

  // Host-side convenience for tests and small tensors (copies to cpu, converts).
  std::vector<double> to_double_vector() const;
  double item() const;
  std::string str() const;  // "f32 (2, 3) cpu"

  int64_t wrap_dim(int64_t d) const {
    int64_t n = dim();
    HYB_CHECK(d >= -n && d < n, "dimension ", d, " out of range for a tensor of shape ", shape_str(shape_));
    return d < 0 ? d + n : d;
  }

 private:
  static Tensor contiguous_meta(const Shape& shape, DType dtype, Device device);  // no storage yet

  std::shared_ptr<Storage> storage_;
  Shape shape_, strides_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_;  // for tensors without storage (numel 0)
  bool defined_ = false;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  HYB_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
            " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

// Checks shared by ops: one message format, naming the op and both shapes.
void check_same_shape(const char* op, const Tensor& a, const Tensor& b, const char* name_a = "a",
                      const char* name_b = "b");
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_dtype(const char* op, const Tensor& t, const char* name, std::initializer_list<DType> allowed);

}  // namespace hyb
