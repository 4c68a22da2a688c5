// Var: a Tensor plus its place in autograd. Leaves (parameters, inputs that want gradients) own a
// GradCell whose .grad accumulates across backward calls; op outputs get a fresh non-leaf cell whose
// grad lives only until its producing node has run in backward.
//   Var w(Tensor::empty({4, 4}), /*requires_grad=*/true);
//   Var y = matmul(x, w);  ...  backward(loss);  w.grad();
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace hyb {

struct GradCell {
  Tensor grad;
  bool requires_grad = false;
  bool leaf = true;
  std::string name;  // parameter name for leaves, "" otherwise
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor data, bool requires_grad = false, std::string name = "");
  Var(Tensor data, std::shared_ptr<GradCell> cell) : data_(std::move(data)), cell_(std::move(cell)) {}

  const Tensor& data() const { return data_; }
  // Replaces the value in place (optimizer steps, checkpoint loads); keeps the grad cell.
  void set_data(Tensor t) { data_ = std::move(t); }
  bool defined() const { return data_.defined(); }
  bool requires_grad() const { return cell_ && cell_->requires_grad; }
  const Tensor& grad() const;
  void set_grad(Tensor g) const;
  void zero_grad() const;
  const std::shared_ptr<GradCell>& cell() const { return cell_; }
  const std::string& name() const;

  const Shape& shape() const { return data_.shape(); }
  int64_t dim() const { return data_.dim(); }
  int64_t size(int64_t d) const { return data_.size(d); }
  int64_t numel() const { return data_.numel(); }
  DType dtype() const { return data_.dtype(); }
  Device device() const { return data_.device(); }

 private:
  Tensor data_;
  std::shared_ptr<GradCell> cell_;
};

}  // namespace hyb
