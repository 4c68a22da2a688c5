#include "autograd/var.h"

namespace hyb {

Var::Var(Tensor data, bool requires_grad, std::string name) : data_(std::move(data)) {
  if (requires_grad) {
    cell_ = std::make_shared<GradCell>();
    cell_->requires_grad = true;
    cell_->leaf = true;
    cell_->name = std::move(name);
  }
}

const Tensor& Var::grad() const {
  static const Tensor kNone;
  return cell_ ? cell_->grad : kNone;
}

void Var::set_grad(Tensor g) const {
  HYB_CHECK(cell_, "set_grad on a Var that does not require grad");
  cell_->grad = std::move(g);
}

void Var::zero_grad() const {
  if (cell_ && cell_->grad.defined()) cell_->grad.zero_();
}

const std::string& Var::name() const {
  static const std::string kEmpty;
  return cell_ ? cell_->name : kEmpty;
}

}  // namespace hyb
