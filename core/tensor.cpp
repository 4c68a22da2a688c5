#include "core/tensor.h"

#include <cstring>
#include <numeric>
#include <sstream>

#include "core/dispatch.h"
#include "core/parallel.h"
#if HYBRID_CUDA
#include "core/cuda/tensor_cuda.h"
#endif

namespace hyb {

std::string shape_str(const Shape& s) { return str_cat(s); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Tensor Tensor::contiguous_meta(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) HYB_CHECK(d >= 0, "Tensor: negative size in shape ", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.defined_ = true;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t = contiguous_meta(shape, dtype, device);
  if (t.numel_ > 0) t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> keep) {
  Tensor t = contiguous_meta(shape, dtype, device);
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device, std::move(keep));
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  HYB_CHECK(defined_, "access to an undefined tensor");
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  HYB_ASSERT(shape.size() == strides.size());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  t.numel_ = shape_numel(shape);
  return t;
}

static Shape infer_shape(const Shape& want, int64_t numel, const Shape& from) {
  Shape s = want;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HYB_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(want));
      infer = int64_t(i);
    } else {
      HYB_CHECK(s[i] >= 0, "reshape: negative size in ", shape_str(want));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    HYB_CHECK(known > 0 && numel % known == 0, "reshape: cannot view ", shape_str(from), " as ", shape_str(want));
    s[infer] = numel / known;
  }
  HYB_CHECK(shape_numel(s) == numel, "reshape: cannot view ", shape_str(from), " (", numel, " elements) as ",
            shape_str(want));
  return s;
}

Tensor Tensor::view(const Shape& shape) const {
  HYB_CHECK(is_contiguous(), "view: tensor of shape ", shape_str(shape_), " is not contiguous; use reshape");
  Shape s = infer_shape(shape, numel_, shape_);
  return as_strided(s, contiguous_strides(s), offset_);
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  a = wrap_dim(a);
  b = wrap_dim(b);
  Shape s = shape_, st = strides_;
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return as_strided(s, st, offset_);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  HYB_CHECK(int64_t(order.size()) == dim(), "permute: order of length ", order.size(), " for shape ", shape_str(shape_));
  Shape s(order.size()), st(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t d = wrap_dim(order[i]);
    HYB_CHECK(!seen[d], "permute: dimension ", d, " repeated");
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return as_strided(s, st, offset_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d);
  HYB_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
  int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape_, st = strides_;
  s[d] = (end - start + step - 1) / step;
  st[d] = strides_[d] * step;
  return as_strided(s, st, offset_ + start * strides_[d]);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d);
  HYB_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d], "narrow: [", start, ", ", start + length,
            ") out of range for dimension ", d, " of ", shape_str(shape_));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d);
  HYB_CHECK(index >= -shape_[d] && index < shape_[d], "select: index ", index, " out of range for dimension ", d,
            " of ", shape_str(shape_));
  if (index < 0) index += shape_[d];
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(s, st, offset_ + index * strides_[d]);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim() + 1;
  HYB_CHECK(d >= -n && d < n, "unsqueeze: dimension ", d, " out of range for ", shape_str(shape_));
  if (d < 0) d += n;
  Shape s = shape_, st = strides_;
  int64_t inner = d < dim() ? strides_[d] * shape_[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, inner);
  return as_strided(s, st, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d);
  HYB_CHECK(shape_[d] == 1, "squeeze: dimension ", d, " of ", shape_str(shape_), " is not 1");
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(s, st, offset_);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor t = empty(shape_, dtype_, d);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor t = empty(shape_, dt, device());
  t.copy_(*this);
  return t;
}

namespace {

// Walks every element of a strided CPU tensor pair; inner dimension in a tight loop.
template <typename Dst, typename Src>
void copy_cpu_typed(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  Dst* d = static_cast<Dst*>(dst.raw_data());
  const Src* s = static_cast<const Src*>(src.raw_data());
  if (dst.is_contiguous() && src.is_contiguous()) {
    parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] = convert<Dst>(s[i]);
    });
    return;
  }
  const int64_t nd = dst.dim();
  const Shape& shape = dst.shape();
  const int64_t inner = shape[nd - 1];
  const int64_t ds_in = dst.strides()[nd - 1], ss_in = src.strides()[nd - 1];
  const int64_t rows = n / inner;
  parallel_for(rows, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t rem = r, doff = 0, soff = 0;
      for (int64_t k = nd - 2; k >= 0; --k) {
        int64_t idx = rem % shape[k];
        rem /= shape[k];
        doff += idx * dst.strides()[k];
        soff += idx * src.strides()[k];
      }
      for (int64_t i = 0; i < inner; ++i) d[doff + i * ds_in] = convert<Dst>(s[soff + i * ss_in]);
    }
  });
}

void copy_cpu(const Tensor& dst, const Tensor& src) {
  if (dst.dim() == 0) {
    visit_dtype(dst.dtype(), [&](auto dt) {
      visit_dtype(src.dtype(), [&](auto st) {
        *static_cast<decltype(dt)*>(dst.raw_data()) = convert<decltype(dt)>(*static_cast<const decltype(st)*>(src.raw_data()));
      });
    });
    return;
  }
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dt) {
    visit_dtype(src.dtype(), [&](auto st) { copy_cpu_typed<decltype(dt), decltype(st)>(dst, src); });
  });
}

}  // namespace

void Tensor::copy_(const Tensor& src) const {
  HYB_CHECK(defined_ && src.defined(), "copy_: undefined tensor");
  HYB_CHECK(shape_ == src.shape(), "copy_: destination ", shape_str(shape_), " and source ", shape_str(src.shape()),
            " differ in shape");
  bump_version();
  if (numel_ == 0) return;
  if (is_cpu() && src.is_cpu()) return copy_cpu(*this, src);
#if HYBRID_CUDA
  cuda_copy(*this, src);
#else
  HYB_ASSERT(false, "non-cpu tensor in a build without CUDA");
#endif
}

void Tensor::fill_(double value) const {
  HYB_CHECK(defined_, "fill_: undefined tensor");
  bump_version();
  if (numel_ == 0) return;
  if (is_cpu()) {
    Tensor c = is_contiguous() ? *this : Tensor::empty(shape_, dtype_);
    visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      T v = convert<T>(value);
      T* p = static_cast<T*>(c.raw_data());
      std::fill(p, p + numel_, v);
    });
    if (!c.same_storage(*this)) copy_(c);
    return;
  }
#if HYBRID_CUDA
  cuda_fill(*this, value);
#endif
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor c = to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + numel_);
}

double Tensor::item() const {
  HYB_CHECK(numel_ == 1, "item: tensor of shape ", shape_str(shape_), " has ", numel_, " elements, expected 1");
  return to_double_vector()[0];
}

std::string Tensor::str() const {
  return defined_ ? str_cat(dtype_name(dtype_), " ", shape_str(shape_), " ", device().str()) : "undefined";
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b, const char* na, const char* nb) {
  HYB_CHECK(a.shape() == b.shape(), op, ": ", na, " is ", shape_str(a.shape()), " but ", nb, " is ",
            shape_str(b.shape()), "; they must have the same shape");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  HYB_CHECK(a.device() == b.device(), op, ": inputs on different devices (", a.device().str(), " and ",
            b.device().str(), ")");
}

void check_dtype(const char* op, const Tensor& t, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::string list;
  for (DType d : allowed) list += std::string(list.empty() ? "" : ", ") + dtype_name(d);
  throw Error(str_cat(op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected one of ", list));
}

}  // namespace hyb
